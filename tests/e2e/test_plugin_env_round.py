"""A user's environment package (tests/plugins/countdown, installed by `make test`) runs rounds through the
real CLI, Dagster instance, DuckDB catalog and MLflow store, named by entry point and by import path,
without any change to creditline's code; so does its rubric (a round trains on it), and `creditline rescore`
re-scores a round with a rubric that only an import path names."""

import sys
from pathlib import Path

import pytest

from creditline.store import LineageStore, read_parquet
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
pytest.importorskip("creditline_countdown", reason="the test plugin is installed by `make test`")

SMALL = """
rounds = 2
rubric = "{rubric}"
[env]
name = "{name}"
params = {{ top = 5, max_steps = 6 }}
[rollouts]
tasks_per_round = 4
group_size = 4
[train]
epochs = 1
minibatches = 2
[eval]
num_tasks = 8
"""


def run(data_root: Path, config: Path, experiment: str, rounds: int):
    return creditline(
        data_root, "run", "--experiment", experiment, "--config", str(config), "--rounds", str(rounds)
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    data_root = folder / "data"
    by_name, by_path = folder / "by-name.toml", folder / "by-path.toml"
    by_name.write_text(SMALL.format(name="countdown", rubric="countdown-solved"))
    by_path.write_text(SMALL.format(name="creditline_countdown:make_countdown", rubric="env"))
    for config, experiment, rounds in ((by_name, "countdown", 2), (by_path, "countdown-by-path", 1)):
        result = run(data_root, config, experiment, rounds)
        assert result.returncode == 0, result.stderr[-3000:]
    return LineageStore(data_root / "lineage.duckdb")


@pytest.fixture(scope="module")
def rubric_module(tmp_path_factory):
    """A rubric no package registers, importable as `my_countdown_rubric:RUBRIC` (this process runs the CLI
    and its Dagster runs: `tests.e2e.cli`)."""
    folder = tmp_path_factory.mktemp("rubric")
    (folder / "my_countdown_rubric.py").write_text(
        "from creditline.credit.rubrics import Criterion, Rubric, step_cost, success\n"
        "RUBRIC = Rubric('quick', (Criterion('success', success, 'episode'), Criterion('steps', step_cost, 'step', 0.1)))\n"
    )
    sys.path.insert(0, str(folder))
    yield "my_countdown_rubric:RUBRIC"
    sys.path.remove(str(folder))
    sys.modules.pop("my_countdown_rubric", None)


@pytest.mark.parametrize(("experiment", "rounds"), [("countdown", [1, 2]), ("countdown-by-path", [1])])
def test_a_plugin_environment_plays_whole_rounds_that_verify(finished, experiment, rounds):
    store = finished
    assert store.verify(experiment) == []
    assert [e.round for e in store.evaluations(experiment)] == [0, *rounds]
    for round_ in rounds:
        steps = read_parquet(store.artifact(experiment, round_, "steps").path)
        assert steps["observation"].str.fullmatch(r"at \d target \d").all()  # the plugin's own observations
        assert set(steps["action"]) <= {"more", "less", *steps["action"][~steps["valid_action"]]}
        assert steps["valid_action"].any()


def test_a_plugin_rubric_scores_the_rounds_it_trains_on(finished):
    from creditline.credit.rubric_registry import get_rubric

    store = finished
    version = get_rubric("countdown-solved").version
    for round_ in (1, 2):
        record = store.artifact("countdown", round_, "scores")
        assert record.meta["rubric_version"] == version
        scores = read_parquet(record.path)
        steps = read_parquet(store.artifact("countdown", round_, "steps").path)
        invalid = (~steps["valid_action"]).astype(float).to_numpy()
        assert scores["step_reward"].tolist() == pytest.approx((-0.25 * invalid).tolist())
        assert set(scores.columns) >= {"criterion.solved", "criterion.invalid_word"}
    assert store.experiment_config("countdown")["rubric"] == "countdown-solved"


def test_rescore_takes_a_rubric_by_import_path_and_refuses_a_near_name(finished, rubric_module):
    from creditline.credit.rubric_registry import get_rubric
    from creditline.store import rubric_versions

    store = finished
    data_root = Path(store.path).parent
    result = creditline(data_root, "rescore", "--experiment", "countdown-by-path", "--rubric", rubric_module)
    assert result.returncode == 0, result.stderr[-3000:]
    version = get_rubric(rubric_module).version
    assert any(line.startswith(f"    1  {version}") for line in result.stdout.splitlines()), result.stdout
    rescored = read_parquet(store.artifact("countdown-by-path", 1, "rescore_scores", version).path)
    assert rescored["rubric_version"].eq(version).all() and "criterion.steps" in rescored
    assert {r.version: r.source for r in rubric_versions(store)}[version] == rubric_module
    assert store.verify("countdown-by-path") == []
    typo = creditline(
        data_root, "rescore", "--experiment", "countdown-by-path", "--rubric", "countdown-solvd"
    )
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines() == [
        "error: --rubric 'countdown-solvd' is not a rubric version, and is neither a registered rubric "
        '(countdown-solved, env, env-efficient) nor an import path "package.module:rubric" '
        '(did you mean "countdown-solved"?)'
    ]


def test_the_registered_config_keeps_the_name_it_was_given(finished):
    store = finished
    assert store.experiment_config("countdown")["env"]["name"] == "countdown"
    assert (
        store.experiment_config("countdown-by-path")["env"]["name"] == "creditline_countdown:make_countdown"
    )


def test_a_missing_plugin_is_one_clear_line_before_anything_is_registered(tmp_path):
    config = tmp_path / "missing.toml"
    config.write_text(SMALL.format(name="not_installed_pkg:make_env", rubric="env"))
    result = run(tmp_path / "data", config, "missing", 1)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f'error: {config}: env.name = "not_installed_pkg:make_env": cannot import module '
        "'not_installed_pkg': No module named 'not_installed_pkg'"
    ]
    assert (
        not (tmp_path / "data" / "lineage.duckdb").exists()
        or LineageStore(tmp_path / "data" / "lineage.duckdb").experiment_config("missing") is None
    )
