"""The forked `creditline` of the fault tests ends as a process of its own would: its exit code, its output, a
signal's death, and the command's own environment (`tests/faults/preloaded.py`)."""

from __future__ import annotations

import os
import subprocess
import sys

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
