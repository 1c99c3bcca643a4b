"""Rounds whose rollouts a real verifiers environment plays (`[verifiers] env_id`), and whose held-out
evaluation it plays too (`[eval.verifiers]`), through `creditline run`.

verifiers 0.3.1 (classic `ToolEnv`) and 0.4.0 (a v1 taskset) run in their own venvs (made by `make
install-test`, pinned by scripts/verifiers/requirements-*.txt) against the round's parent checkpoint (the
evaluation: each evaluated checkpoint), served on 127.0.0.1 for the length of the run; the policy is the one
that made the test data (tests/data/verifiers/policy), which calls the `add` tool. The first two of the five
sums are held out: the classic environment's eval dataset (`held_out = 2`; its training dataset is the other
three), the v1 taskset's tasks 0 and 1 (`select`: excluded from the rollouts, included in the evaluation).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from creditline.config import load_config
from creditline.config.checks import ConfigError
from creditline.store import LineageStore, read_parquet
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "data" / "verifiers" / "policy"
VENVS = {"classic": ROOT / ".venv-verifiers-0.3", "v1": ROOT / ".venv-verifiers-0.4"}
SOURCES = {
    "classic": ('env_id = "creditline-arith"\nenv_args = { case = "tool_calls" }\n', "scripts/verifiers/v03"),
    "v1": ('env_id = "creditline_vf_tool_calls"\nenv_args = { agent = { runtime = { type = "subprocess" } } }\n',
           "scripts/verifiers/v04"),
}  # fmt: skip
HELD_OUT = {  # (the rollouts' environment, the evaluation's): sums 0 and 1 are the evaluation's only
    "classic": ('env_id = "creditline-arith"\nenv_args = { case = "tool_calls", held_out = 2 }\n',) * 2,
    "v1": tuple(
        SOURCES["v1"][0] + f'select = {{ {key} = {{ idx = ["0:2"] }} }}\n' for key in ("exclude", "include")
    ),
}
HELD_OUT_SUMS = ("23 + 48", "15 + 31")
"""The prompts of sums 0 and 1 (scripts/verifiers/tasks.py TOOL_EVAL)."""
TOOL_REWARDS = {0.0, 0.25, 1.0, 1.25}
"""What the tool environments' rubric can give: correct (weight 1) + used_add (weight 0.25)."""


def config_file(tmp_path: Path, api: str, env: str | None = None, evaluation: bool = False) -> Path:
    """The experiment: one round, 3 examples × 3 rollouts of `env` (default: the api's tool environment);
    `evaluation`: the tool environment plays the held-out evaluation too, on the held-out sums (num_tasks 3:
    more than the 2 of the split)."""
    source, path = SOURCES[api]
    rollouts, evaluated = HELD_OUT[api] if evaluation else (env or source, None)
    common = f'api = "{api}"\npython = "{VENVS[api]}/bin/python"\npaths = ["{ROOT / path}"]\n'
    path_ = tmp_path / f"{api}.toml"
    path_.write_text(f'initial_policy = "{POLICY}"\nrounds = 1\n'
                     "[rollouts]\ntasks_per_round = 3\ngroup_size = 3\nmax_new_tokens = 40\n"
                     f"[train]\nepochs = 1\nminibatches = 2\n[eval]\nnum_tasks = {3 if evaluation else 2}\n"
                     + (f"[eval.verifiers]\n{common}{evaluated}" if evaluation else "")
                     + f"[verifiers]\n{common}{rollouts}")  # fmt: skip
    return path_


@pytest.mark.parametrize("api", ["classic", "v1"])
def test_a_verifiers_environment_plays_the_round_and_evaluates_the_checkpoints(tmp_path, api):
    data = tmp_path / "data"
    config = config_file(tmp_path, api, evaluation=True)
    run = creditline(data, "run", "--experiment", f"vf-{api}", "--config", str(config))
    assert run.returncode == 0, run.stderr
    store = LineageStore(data / "lineage.duckdb")
    experiment = f"vf-{api}"
    source = store.artifact(experiment, 1, "source")
    assert source.meta["format"] == api
    assert source.parents == ((store.initial_policy(experiment).content_hash, "generated_by"),)
    assert {p[1] for p in store.artifact(experiment, 1, "steps").parents} == {"imported_from"}
    episodes = read_parquet(store.artifact(experiment, 1, "episodes").path)
    steps = read_parquet(store.artifact(experiment, 1, "steps").path)
    assert len(episodes) == 9 and episodes.groupby("group_id").size().tolist() == [3, 3, 3]
    assert steps["action"].str.contains("add(", regex=False).any()  # the policy called the tool
    assert (steps.loc[steps["step_idx"] > 0, "observation"] != "").all()  # the tool's replies came back
    staged = (Path(source.path) / ("results.jsonl" if api == "classic" else "traces.jsonl")).read_text()
    assert not any(held_out in staged for held_out in HELD_OUT_SUMS)  # the rollouts never saw them

    # The evaluation: the initial policy (round 0) and round 1's checkpoint, each on the held-out split only
    # (2 examples, though num_tasks is 3), once each, scored by the environment's own rubric.
    evaluations = store.evaluations(experiment)
    assert [(e.round, e.episodes) for e in evaluations] == [(0, 2), (1, 2)]
    tables = [read_parquet(store.artifact(experiment, r, "evaluation").path) for r in (0, 1)]
    for evaluation, table in zip(evaluations, tables, strict=True):
        assert set(table["env_return"]) <= TOOL_REWARDS
        assert (table["success"] == (table["env_return"] > 0)).all()
        assert evaluation.mean_return == pytest.approx(table["env_return"].mean())
        assert evaluation.invalid_action_rate == 0.0 and evaluation.mean_steps >= 1
    assert tables[0]["task_id"].tolist() == tables[1]["task_id"].tolist()  # the same examples every round
    verify = creditline(data, "verify", "--experiment", experiment)
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout

    if api == "classic":  # same checkpoint, same seed: the same rollouts (verifiers' uuids and times aside)
        again = tmp_path / "again"
        assert creditline(again, "run", "--experiment", experiment, "--config", str(config)).returncode == 0
        other = LineageStore(again / "lineage.duckdb")
        for round_, kind in ((1, "steps"), (0, "evaluation"), (1, "evaluation")):  # and the same evaluations
            assert (other.artifact(experiment, round_, kind).content_hash
                    == store.artifact(experiment, round_, kind).content_hash), (round_, kind)  # fmt: skip


def test_a_failing_environment_fails_the_round_with_its_own_error_and_records_no_rollouts(tmp_path):
    data = tmp_path / "data"
    config = config_file(tmp_path, "classic", env='env_id = "no-such-env"\n')
    run = creditline(data, "run", "--experiment", "vf-missing", "--config", str(config))
    assert run.returncode == 1
    assert "verifiers environment 'no-such-env' (classic) exited with 1" in run.stderr
    assert (
        "Could not import 'no-such-env' environment" in run.stderr
        or "no-such-env" in run.stderr.splitlines()[-1]
    )
    store = LineageStore(data / "lineage.duckdb")
    assert (
        store.artifact("vf-missing", 1, "source") is None and store.artifact("vf-missing", 1, "steps") is None
    )


def test_a_verifiers_source_needs_an_interpreter(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[verifiers]\nenv_id = "creditline-arith"\n')
    with pytest.raises(ConfigError, match=r"verifiers.python = \"\": is needed with verifiers.env_id"):
        load_config(path)
    path.write_text(f'[verifiers]\nenv_id = "creditline-arith"\npython = "{tmp_path}/nope"\n')
    with pytest.raises(ConfigError, match="is not an executable file"):
        load_config(path)
