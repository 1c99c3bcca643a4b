"""Rounds whose rollouts a real verifiers environment plays (`[verifiers] env_id`), through `creditline run`.

verifiers 0.3.1 (classic `ToolEnv`) and 0.4.0 (a v1 taskset) run in their own venvs (made by `make
install-test`, pinned by scripts/verifiers/requirements-*.txt) against the round's parent checkpoint, which
the rollouts asset serves on 127.0.0.1 for the length of the run; the policy is the one that made the test
data (tests/data/verifiers/policy), which calls the `add` tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from creditline.config import load_config
from creditline.config_checks import ConfigError
from creditline.store import LineageStore, read_parquet
from e2e.cli import creditline

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "data" / "verifiers" / "policy"
VENVS = {"classic": ROOT / ".venv-verifiers-0.3", "v1": ROOT / ".venv-verifiers-0.4"}
SOURCES = {
    "classic": ('env_id = "creditline-arith"\nenv_args = { case = "tool_calls" }\n', "scripts/verifiers/v03"),
    "v1": ('env_id = "creditline_vf_tool_calls"\nenv_args = { agent = { runtime = { type = "subprocess" } } }\n',
           "scripts/verifiers/v04"),
}  # fmt: skip


def config_file(tmp_path: Path, api: str, env: str | None = None) -> Path:
    source, path = SOURCES[api]
    path_ = tmp_path / f"{api}.toml"
    path_.write_text(f'initial_policy = "{POLICY}"\nrounds = 1\n'
                     "[rollouts]\ntasks_per_round = 3\ngroup_size = 3\nmax_new_tokens = 40\n"
                     "[train]\nepochs = 1\nminibatches = 2\n[eval]\nnum_tasks = 2\n"
                     f'[verifiers]\napi = "{api}"\npython = "{VENVS[api]}/bin/python"\npaths = ["{ROOT / path}"]\n'
                     + (env or source))  # fmt: skip
    return path_


@pytest.mark.parametrize("api", ["classic", "v1"])
def test_a_verifiers_environment_plays_the_round_against_the_served_parent(tmp_path, api):
    data = tmp_path / "data"
    run = creditline(data, "run", "--experiment", f"vf-{api}", "--config", str(config_file(tmp_path, api)))
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
    verify = creditline(data, "verify", "--experiment", experiment)
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout

    if api == "classic":  # same checkpoint, same seed: the same rollouts (verifiers' uuids and times aside)
        again = tmp_path / "again"
        assert (
            creditline(
                again, "run", "--experiment", experiment, "--config", str(config_file(tmp_path, api))
            ).returncode
            == 0
        )
        other = LineageStore(again / "lineage.duckdb")
        assert (
            other.artifact(experiment, 1, "steps").content_hash
            == store.artifact(experiment, 1, "steps").content_hash
        )


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
