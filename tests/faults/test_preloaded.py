"""The forked `creditline` of the fault tests ends as a process of its own would: its exit code, its output, a
signal's death, and the command's own environment (`tests/faults/preloaded.py`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def test_a_forked_command_exits_with_the_code_and_output_of_a_process_of_its_own(preloaded_cli, tmp_path):
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    for args in (("--help",), ("run", "--rounds", "many")):
        forked = preloaded_cli.run(*args, env=env)
        started = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], env=env, capture_output=True,
                                 text=True, timeout=300)  # fmt: skip
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            started.returncode,
            started.stdout,
            started.stderr,
        )
        assert forked.stdout if args == ("--help",) else forked.returncode == 2 and forked.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_forked_command_reads_its_own_failpoint(preloaded_cli, tmp_path):
    """Two commands from one server, armed at different failpoints, die at their own: the failpoint module
    is imported after the fork, under each command's environment."""
    from tests.faults.test_kill_matrix import TINY

    run = ("run", "--experiment", "forked", "--config", str(TINY), "--rounds", "1")
    early = preloaded_cli.killed_at(tmp_path / "early", "write:episodes.parquet:1", *run)
    later = preloaded_cli.killed_at(tmp_path / "later", "after:steps:1", *run)
    assert early.returncode == later.returncode == -9
    assert not (tmp_path / "early" / "forked" / "r001" / "episodes.parquet").exists()
    assert (tmp_path / "later" / "forked" / "r001" / "steps.parquet").exists()


def test_forked_commands_run_side_by_side_and_take_signals_as_processes_of_their_own(preloaded_cli, tmp_path):
    """One command stopped at a failpoint (SIGSTOP) while a second forks, runs and ends: each exit is its own.
    Then the stopped one takes a SIGTERM from outside and, continued, stops as `creditline run` does (one line,
    130); once waited for, its pid is reaped."""
    from creditline.liveness import start_ticks
    from tests.faults.test_kill_matrix import TINY

    env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
    env |= {"CREDITLINE_DATA_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    stopped = preloaded_cli.start("run", "--experiment", "side", "--config", str(TINY), "--rounds", "1",
                                  env=env | {"CREDITLINE_FAULT": "after:steps:1", "CREDITLINE_FAULT_SIGNAL": "STOP"})  # fmt: skip
    assert stopped.stdout.readline().startswith("experiment side: 1 round")
    stopped.wait_stopped()
    helped = preloaded_cli.start("--help", env=env)
    out, err = helped.communicate(timeout=120)
    assert (helped.returncode, err) == (0, "") and "report" in out
    assert stopped.poll() is None and stopped.stopped()
    stopped.send_signal(signal.SIGTERM)  # pending while it is stopped
    stopped.send_signal(signal.SIGCONT)
    _, err = stopped.communicate(timeout=300)
    assert stopped.returncode == 130, err
    assert err.splitlines() == ["interrupted: a round left incomplete is completed by `creditline run` again"]
    assert start_ticks(stopped.pid) is None


def test_closing_the_server_ends_the_commands_still_running(tmp_path):
    """A command a failed test left running (here one waiting ten minutes for its moment) does not outlive the
    session, nor hold up its end: the server kills it, reaps it and exits."""
    from creditline.liveness import start_ticks
    from tests.faults.preloaded import PreloadedCli

    cli = PreloadedCli(preload=())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    waiting = cli.start(
        "instance", str(tmp_path), str(time.time() + 600), env=env, module="tests.faults.first_open"
    )
    assert waiting.poll() is None
    cli.close()
    assert start_ticks(waiting.pid) is None
