"""Two experiments on one data root share the `gpu` pool: the second must never hang on the first's death.

The scene, built with failpoints that stop a process (SIGSTOP) at a known place:
- B (experiment `second`) stops while writing its scores (a step outside the pool): in flight, holding no slot;
- A (experiment `first`) starts, and stops in its first training update: it holds the only `gpu` slot;
- B is continued: its training step asks for the slot and waits inside Dagster's executor.
Then A dies (SIGKILL) or B is told to stop (SIGTERM). Before the pool watcher, B waited for ever and
ignored SIGTERM (a tester waited 420 s).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import dagster as dg
import pytest

from creditline.liveness import start_ticks
from tests.faults.preloaded import ForkedProcess, PreloadedCli

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


def _start(cli: PreloadedCli, data_root: Path, experiment: str, stop_at: str | None) -> ForkedProcess:
    """`creditline run` of `experiment`'s round 1, forked from the preloaded server (`tests/faults/preloaded.py`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
    env |= {"CREDITLINE_DATA_ROOT": str(data_root), "OMP_NUM_THREADS": "1"}
    if stop_at:
        env |= {"CREDITLINE_FAULT": stop_at, "CREDITLINE_FAULT_SIGNAL": "STOP"}
    return cli.start("run", "--experiment", experiment, "--config", str(TINY), "--rounds", "1", env=env)


def _read_until(process: ForkedProcess, prefix: str, timeout_s: float) -> list[str]:
    """Lines of stdout up to and including the first that starts with `prefix`."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    os.set_blocking(process.stdout.fileno(), False)
    while not any(line.startswith(prefix) for line in lines):
        assert time.monotonic() < deadline, f"no {prefix!r} line in {timeout_s} s: {lines}"
        assert process.poll() is None, (lines, process.communicate())
        lines += [line for line in (process.stdout.readline() for _ in range(50)) if line]
        time.sleep(0.2)
    return lines


@pytest.fixture
def b_waits_for_a(tmp_path, preloaded_cli):
    """(A, B, data root) with A stopped holding the `gpu` slot and B's training step waiting for it."""
    b = _start(preloaded_cli, tmp_path, "second", "write:scores.parquet:1")
    a = None
    try:
        b.wait_stopped()
        a = _start(preloaded_cli, tmp_path, "first", "train:update:1")
        a.wait_stopped()
        b.send_signal(signal.SIGCONT)
        waiting = _read_until(b, "waiting: pool 'gpu' is held by", timeout_s=120)
        assert f"pid {a.pid} on" in waiting[-1]  # it says for whom it waits
        yield a, b, tmp_path
    finally:
        for process in (a, b):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_a_dead_holder_is_reclaimed_by_the_waiting_experiment(b_waits_for_a):
    a, b, data_root = b_waits_for_a
    a.kill()
    a.wait()  # reaped: its pid is gone
    assert start_ticks(a.pid) is None
    out, err = b.communicate(timeout=240)
    assert b.returncode == 0, err
    assert "cleaned up dagster run" in out and f"pid {a.pid} on" in out  # B reclaimed A's run and slot itself
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    runs = {r.tags["dagster/partition"]: r.status for r in instance.get_runs()}
    instance.dispose()
    assert runs == {"second.r001": dg.DagsterRunStatus.SUCCESS, "first.r001": dg.DagsterRunStatus.FAILURE}


def test_a_waiting_run_stops_at_once_on_sigterm(b_waits_for_a):
    a, b, data_root = b_waits_for_a
    sent = time.monotonic()
    b.send_signal(signal.SIGTERM)
    out, err = b.communicate(timeout=60)
    assert time.monotonic() - sent < 30
    assert b.returncode == 130, err
    assert err.splitlines() == ["interrupted: a round left incomplete is completed by `creditline run` again"]
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    b_run = next(r for r in instance.get_runs() if r.tags["dagster/partition"] == "second.r001")
    pending = instance.event_log_storage.get_concurrency_info("gpu").pending_run_ids
    instance.dispose()
    assert b_run.status == dg.DagsterRunStatus.FAILURE and b_run.run_id not in pending
