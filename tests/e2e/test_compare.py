"""`creditline compare`: estimators × seeds on a user's experiment config, each (estimator, seed) an experiment
of its own run as Dagster rounds with full lineage; then the table with CIs, the picture, and an MLflow
experiment of the sweep. On a built-in environment and on a plugin's (tests/plugins/countdown)."""

import json
from pathlib import Path

import dagster as dg
import mlflow
import pytest

from creditline.store import LineageStore
from creditline.store.rounds import round_commits
from pipelines.compare import COMPARISON_TAG
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
COUNTDOWN = """
rounds = 2
rubric = "countdown-solved"
env = { name = "countdown", params = { top = 5, max_steps = 6 } }
rollouts = { tasks_per_round = 4, group_size = 4 }
train = { epochs = 1, minibatches = 2 }
eval = { num_tasks = 8 }
"""


def compare(data_root: Path, config: Path, name: str):
    return creditline(data_root, "compare", "--config", str(config), "--estimators", "grpo,gigpo",
                      "--seeds", "2", "--rounds", "2", "--name", name)  # fmt: skip


def check_sweep(data_root: Path, name: str, shown: str) -> dict:
    """What a finished 2 × 2 × 2 sweep leaves: four experiments of two committed rounds each (eight Dagster
    runs tagged with the comparison), the table, the picture, the runs, and the MLflow comparison."""
    store = LineageStore(data_root / "lineage.duckdb")
    members = [f"{name}-{e}-s{s}" for e in ("grpo", "gigpo") for s in (0, 1)]
    for member in members:
        assert sorted(round_commits(store, member)) == [1, 2], member
        assert store.artifact(member, 2, "advantages").meta["estimator"] == member.split("-")[-2]
    folder = data_root / "comparisons" / name
    rows = (folder / "table.md").read_text().splitlines()[2:]
    assert [row.split(" | ")[1:3] for row in rows] == [["grpo", "2"], ["gigpo", "2"]]
    assert rows[0] in shown and rows[1] in shown  # printed too
    runs = json.loads((folder / "runs.json").read_text())
    assert sorted(r["experiment"] for r in runs) == sorted(members)
    for run in runs:  # the initial policy and two rounds; the budget counted from the stored tables
        assert (
            len(run["success"]) == 3
            and run["episodes"] == 2 * 16
            and run["tokens"] > 0
            and run["seconds"] > 0
        )
    assert (folder / "curves.png").read_bytes().startswith(b"\x89PNG")
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    tagged = instance.get_runs(dg.RunsFilter(tags={COMPARISON_TAG: name}))
    assert len(tagged) == 8 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in tagged)
    instance.dispose()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{data_root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(f"compare-{name}")
    names = sorted(r.info.run_name for r in client.search_runs([experiment.experiment_id]))
    assert names == sorted([*members, f"{name}: table"])
    return {r["experiment"]: r["success"] for r in runs}


def test_compare_on_a_built_in_environment_and_again_without_rerunning(tmp_path):
    done = compare(tmp_path, TINY, "tiny")
    assert done.returncode == 0, done.stderr
    first = check_sweep(tmp_path, "tiny", done.stdout)
    again = compare(tmp_path, TINY, "tiny")  # every round committed: nothing runs again
    assert again.returncode == 0, again.stderr
    assert "round   1/2" not in again.stdout
    assert check_sweep(tmp_path, "tiny", again.stdout) == first


def test_compare_on_a_plugin_environment(tmp_path):
    pytest.importorskip("creditline_countdown", reason="the test plugin is installed by `make test`")
    config = tmp_path / "countdown.toml"
    config.write_text(COUNTDOWN)
    done = compare(tmp_path, config, "count")
    assert done.returncode == 0, done.stderr
    check_sweep(tmp_path, "count", done.stdout)


def test_an_unknown_estimator_is_refused_before_anything_is_registered(tmp_path):
    refused = creditline(tmp_path, "compare", "--config", str(TINY), "--estimators", "grpo,gipgo")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "gipgo not among the registered estimators" in refused.stderr
    assert (
        not (tmp_path / "lineage.duckdb").exists()
        or LineageStore(tmp_path / "lineage.duckdb").experiments() == []
    )
