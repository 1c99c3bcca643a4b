"""Two writers: a second `creditline run` of the same experiment refuses while the first is alive."""

import os
import signal
from pathlib import Path

import dagster as dg
import pytest

from creditline.store import LineageStore
from creditline.store.rounds import round_commits

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


def test_a_second_run_of_the_same_experiment_refuses_with_the_holder(tmp_path, preloaded_cli):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
    env |= {"CREDITLINE_DATA_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    command = ("run", "--experiment", "twice", "--config", str(TINY))  # forked from the preloaded server
    # the first stops itself in its first training update (SIGSTOP): alive, holding the lease, however slowly
    # the second starts on a loaded machine
    paused = env | {"CREDITLINE_FAULT": "train:update:1", "CREDITLINE_FAULT_SIGNAL": "STOP"}
    first = preloaded_cli.start(*command, env=paused)
    try:
        assert first.stdout.readline().startswith("experiment twice: 2 rounds")  # it holds the lease now
        first.wait_stopped()
        second = preloaded_cli.run(*command, env=env, timeout_s=300)
        first.send_signal(signal.SIGCONT)
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith("error: experiment 'twice' is being run by another `creditline run` "
                                        f"(pid {first.pid} on")  # fmt: skip
        assert len(second.stderr.splitlines()) == 1
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
    finally:
        first.kill()
    assert sorted(round_commits(LineageStore(tmp_path / "lineage.duckdb"), "twice")) == [1, 2]
    instance = dg.DagsterInstance.from_config(str(tmp_path / "dagster_home"))
    runs = instance.get_runs()
    assert sorted(r.tags["dagster/partition"] for r in runs) == [
        "twice.r001",
        "twice.r002",
    ]  # each trained once
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
