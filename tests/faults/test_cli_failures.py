"""How `creditline run` ends when a round does not finish: interrupted, or stopped by a blocking check.

SIGTERM (or Ctrl-C) mid-round: one line, exit 130, the round left for a plain re-run to complete.
A stored table corrupted behind the store's back between its write and its check: the blocking check stops
the round before training,
reported as `error:` lines (exit 2), with no Dagster log or traceback.
"""

import os
import signal
from pathlib import Path

import pytest

from creditline.store import LineageStore, read_parquet, write_parquet_atomic
from creditline.store.rounds import round_commits
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


def _env(data_root: Path, fault: str | None = None, signal_name: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
    env |= {"CREDITLINE_DATA_ROOT": str(data_root), "OMP_NUM_THREADS": "1"}
    env |= {"CREDITLINE_FAULT": fault} if fault else {}
    return env | ({"CREDITLINE_FAULT_SIGNAL": signal_name} if signal_name else {})


TERM_RUN = ("run", "--experiment", "term", "--config", str(TINY))
INTERRUPTED = ["interrupted: a round left incomplete is completed by `creditline run` again"]


def _rerun_completes(data_root: Path) -> None:
    """A plain re-run and `verify`, in this process (`tests.e2e.cli`): the command's own code, without the
    seconds of imports a process pays. The signal went to a process of its own."""
    rerun = creditline(data_root, *TERM_RUN)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(round_commits(LineageStore(data_root / "lineage.duckdb"), "term")) == [1, 2]
    verify = creditline(data_root, "verify", "--experiment", "term")
    assert verify.returncode == 0, verify.stdout


def test_sigterm_inside_a_step_leaves_the_round_incomplete_and_a_rerun_completes(tmp_path, preloaded_cli):
    stopped = preloaded_cli.run(*TERM_RUN, env=_env(tmp_path, "train:update:1", "TERM"))
    assert stopped.returncode == 130
    assert stopped.stderr.splitlines() == INTERRUPTED
    store = LineageStore(tmp_path / "lineage.duckdb")
    assert round_commits(store, "term") == {}
    assert store.artifact("term", 1, "checkpoint") is None
    audit = creditline(tmp_path, "verify", "--experiment", "term")
    assert audit.returncode == 1
    assert "incomplete  term/1: round has" in audit.stdout  # no commit point: the round is not done
    assert "MLflow round 1's run" in audit.stdout and "is KILLED, not FINISHED" in audit.stdout
    _rerun_completes(tmp_path)


def test_sigterm_from_outside_at_any_moment_ends_in_one_line_and_a_rerun_completes(tmp_path, preloaded_cli):
    """Between two steps Dagster swallows the signal and finishes the run; the CLI still stops there."""
    process = preloaded_cli.start(*TERM_RUN, env=_env(tmp_path))
    assert process.stdout.readline().startswith("experiment term: 2 rounds")
    store = LineageStore(tmp_path / "lineage.duckdb")
    while store.artifact("term", 1, "steps") is None:  # mid-round: rollouts recorded, training not yet
        assert process.poll() is None, process.stderr.read()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    assert err.splitlines() == INTERRUPTED
    assert 2 not in round_commits(store, "term")  # no round starts after the signal
    _rerun_completes(tmp_path)


def test_sigterm_inside_an_mlflow_write_ends_in_one_line_and_a_rerun_completes(tmp_path, preloaded_cli):
    """MLflow logs the interrupted statement as an ERROR with its traceback; none of it reaches stderr."""
    stopped = preloaded_cli.start(*TERM_RUN, env=_env(tmp_path), module="tests.faults.term_in_mlflow_sql")
    _, err = stopped.communicate(timeout=600)
    assert stopped.returncode == 130, err
    assert err.splitlines() == INTERRUPTED
    assert round_commits(LineageStore(tmp_path / "lineage.duckdb"), "term") == {}
    _rerun_completes(tmp_path)


def test_a_failed_blocking_check_is_reported_in_error_lines_and_exit_2(tmp_path, preloaded_cli):
    """The steps table is corrupted after it was written and before its check ran (the run stopped in between):
    a re-run would regenerate it (the round is not committed), so the check is what must catch it here."""
    run = ("run", "--experiment", "checked", "--config", str(TINY))
    paused = preloaded_cli.start(*run, env=_env(tmp_path, "recorded:rollouts:1", "STOP"))
    try:
        paused.wait_stopped()
        steps = tmp_path / "checked" / "r001" / "steps.parquet"
        write_parquet_atomic(read_parquet(steps).iloc[1:], steps)  # valid Parquet, one row short
        paused.send_signal(signal.SIGCONT)
        out, err = paused.communicate(timeout=600)
    finally:
        paused.kill()
    assert paused.returncode == 2, err
    lines = err.splitlines()
    assert lines[0].startswith("error: round 1 stopped before training (dagster run ")
    assert (
        lines[1].startswith("error: check steps_stored_and_valid on steps failed: ") and "changed" in lines[1]
    )
    assert len(lines) == 2 and "Traceback" not in err
    assert LineageStore(tmp_path / "lineage.duckdb").artifact("checked", 1, "checkpoint") is None
