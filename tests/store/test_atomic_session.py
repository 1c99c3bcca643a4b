"""An atomic lineage session is one transaction: its calls are committed together, or none of them is.

A stage records its outputs, its own records and its run in one (`assets.stage.Stage.produce`); the kill matrix
kills real stages inside it (tests/faults/test_kill_matrix.py). Here: the store's own behaviour, an exception
and a SIGKILL inside the block, each beside a plain session as the control.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from creditline.store import ArtifactRecord, LineageStore, RunRecord

EPISODES = ArtifactRecord("exp", 1, "episodes", "/d/episodes.parquet", "h-episodes")
STEPS = ArtifactRecord("exp", 1, "steps", "/d/steps.parquet", "h-steps")


def _records(store: LineageStore) -> None:
    store.record_artifact(EPISODES, [("policy0", "generated_from")])
    store.record_artifact(STEPS, [("policy0", "generated_from")])
    store.record_run(RunRecord("dagster-1", "exp", 1, "rollouts", None, "v1", {}))


class Refused(Exception):
    pass


@pytest.mark.parametrize("atomic", [True, False])
def test_a_block_that_raises_keeps_its_records_only_when_not_atomic(tmp_path: Path, atomic: bool) -> None:
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("exp", {})
    with pytest.raises(Refused), store.session(atomic=atomic):
        _records(store)
        raise Refused
    kept = [a.kind for a in store.artifacts("exp")]
    assert kept == ([] if atomic else ["episodes", "steps"])
    assert store.parents("h-steps") == ([] if atomic else [("policy0", "generated_from")])
    assert len(store.runs("exp")) == (0 if atomic else 1)
    _records(store)  # the catalog takes the same records afterwards
    assert [a.kind for a in store.artifacts("exp")] == ["episodes", "steps"]


def test_an_atomic_block_commits_every_call(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("exp", {})
    with store.session(atomic=True):
        _records(store)
        assert store.artifact("exp", 1, "steps") is not None  # its own writes are read back inside it
    again = LineageStore(store.path)  # another store object: what is in the file
    assert [a.kind for a in again.artifacts("exp")] == ["episodes", "steps"]
    assert [r.asset for r in again.runs("exp")] == ["rollouts"]


def test_an_atomic_block_that_made_the_schema_and_raised_leaves_it_to_be_made_again(tmp_path: Path) -> None:
    """The schema is created by a store's first call; inside an atomic block that raises, it is rolled back
    with the rest, and the store's next call creates it again."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    with pytest.raises(Refused), store.session(atomic=True):
        store.register_experiment("exp", {})
        raise Refused
    store.register_experiment("exp", {})
    assert store.experiment_config("exp") == {}


_KILLED_INSIDE = """
import os, signal, sys
from creditline.store import ArtifactRecord, LineageStore
store = LineageStore(sys.argv[1])
with store.session(atomic=sys.argv[2] == "atomic"):
    store.record_artifact(ArtifactRecord("exp", 1, "episodes", "/d/e.parquet", "h-episodes"), [("p", "generated_from")])
    store.record_artifact(ArtifactRecord("exp", 1, "steps", "/d/s.parquet", "h-steps"), [("p", "generated_from")])
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("atomic", [True, False])
def test_a_process_killed_inside_the_block_leaves_its_records_only_when_not_atomic(
    tmp_path: Path, atomic: bool
) -> None:
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("exp", {})
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_INSIDE, store.path, "atomic" if atomic else "plain"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [a.kind for a in store.artifacts("exp")] == ([] if atomic else ["episodes", "steps"])
    assert store.parents("h-episodes") == ([] if atomic else [("p", "generated_from")])


def test_an_atomic_block_inside_a_plain_one_is_refused_and_a_plain_one_inside_an_atomic_one_joins_it(
    tmp_path: Path,
) -> None:
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("exp", {})
    with store.session(), pytest.raises(RuntimeError, match="atomic lineage session"):
        with store.session(atomic=True):
            pass
    with pytest.raises(Refused), store.session(atomic=True):
        with store.session():
            _records(store)
        raise Refused
    assert store.artifacts("exp") == []
