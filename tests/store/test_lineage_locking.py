"""Another process holding the DuckDB file makes writers wait and retry, then fail naming the file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from creditline.store import ArtifactRecord, LineageStore, RetryPolicy, StoreLockedError, is_lock_error

_HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


@contextmanager
def _held_by_another_process(path: str, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """A child process opens ``path`` for writing and keeps it open for ``seconds``."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, path, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


def test_duckdb_raises_a_lock_error_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "l.duckdb")
    with _held_by_another_process(path, 0.5), pytest.raises(duckdb.IOException) as info:
        duckdb.connect(path)
    assert is_lock_error(info.value)


def test_write_waits_for_the_other_process_and_succeeds(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "l.duckdb")
    store.register_experiment("exp", {})
    with _held_by_another_process(store.path, 1.0):
        start = time.monotonic()
        store.record_artifact(
            ArtifactRecord("exp", 0, "episodes", "/d/e.parquet", "h1"), [("policy0", "generated_from")]
        )
        waited = time.monotonic() - start
    assert waited > 0.5  # it went through only after the holder let go
    assert store.parents("h1") == [("policy0", "generated_from")]


def test_exhausted_retries_name_the_file(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "l.duckdb", RetryPolicy(timeout_s=0.3))
    with _held_by_another_process(store.path, 5.0), pytest.raises(StoreLockedError) as info:
        store.artifacts("exp")
    assert store.path in str(info.value)
    assert info.value.attempts > 1


_WRITER = """
import sys
from creditline.store import ArtifactRecord, LineageStore
store, worker = LineageStore(sys.argv[1]), sys.argv[2]
for r in range(5):
    store.record_artifact(ArtifactRecord("exp", r, "w" + worker, "/d", worker + str(r)), [("root", "from")])
    # every writer records the same key at once, inside a session as the assets do: one row must remain
    with store.session():
        store.record_artifact(ArtifactRecord("exp", r, "shared", "/d", "shared" + str(r)), [("root", "from")])
"""


def test_concurrent_writer_processes_lose_nothing(store: LineageStore) -> None:
    """Three processes write at once (DuckDB file: turns at the lock; Postgres: concurrent transactions,
    a conflict retried): every row lands exactly once, the contended key once."""
    store.record_initial_policy("exp", "/models/tiny", "root")
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, store.path, str(i)], cwd=Path(__file__).parents[2])
        for i in range(3)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    artifacts = store.artifacts("exp")
    assert len(artifacts) == 1 + 3 * 5 + 5
    assert sorted(a.content_hash for a in artifacts if a.kind == "shared") == [f"shared{r}" for r in range(5)]
    assert store.parents("14") == [("root", "from")]
    assert store.parents("shared3") == [("root", "from")]


_PROBE = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1]).close()
    print("free")
except duckdb.IOException as error:
    print("locked" if "lock" in str(error).lower() else error)
"""


def _seen_from_another_process(path: str) -> str:
    """The word "free" when another process can open the catalog file right now, "locked" when it is held."""
    probe = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True, timeout=60)
    return probe.stdout.strip()


def test_the_file_is_locked_for_a_session_only_and_free_between_transactions(tmp_path: Path) -> None:
    """The catalog is attached to this process's DuckDB for one transaction or session and detached after
    it (`connection.open_catalog`): a file left attached would keep every other process out."""
    store = LineageStore(tmp_path / "l.duckdb")
    store.register_experiment("exp", {})
    assert _seen_from_another_process(store.path) == "free"
    with store.session():
        store.artifacts("exp")
        with store.session():  # nested: the outer block's connection
            store.artifacts("exp")
        assert _seen_from_another_process(store.path) == "locked"
        store.artifacts("exp")
    assert _seen_from_another_process(store.path) == "free"
    other = LineageStore(tmp_path / "other.duckdb")  # a second catalog in one process, one inside the other
    with store.session():
        other.register_experiment("exp", {})
        assert _seen_from_another_process(other.path) == "free"
    assert _seen_from_another_process(store.path) == "free"
    assert [r[0] for r in store.fetchall("SELECT experiment FROM experiments")] == ["exp"]


@pytest.mark.parametrize("statement", ["ATTACH", "DETACH"])
@pytest.mark.parametrize("took_effect", [True, False])
def test_an_interrupt_while_attaching_or_detaching_leaves_the_next_call_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, statement: str, took_effect: bool
) -> None:
    """Ctrl-C or SIGTERM lands while DuckDB attaches or detaches the catalog, after the statement took effect or
    before: the process's next call still works, and the file is free for other processes after it."""
    from creditline.store import connection

    store = LineageStore(tmp_path / "l.duckdb")
    store.register_experiment("exp", {})
    host = connection._host(os.getpid())
    interrupts = [statement]

    class Interrupted:
        def __getattr__(self, name: str):
            return getattr(host, name)

        def execute(self, sql: str, *args):
            if interrupts and sql.startswith(interrupts[0]):
                interrupts.clear()
                if took_effect:
                    host.execute(sql, *args)
                raise KeyboardInterrupt
            return host.execute(sql, *args)

    monkeypatch.setattr(connection, "_host", lambda pid: Interrupted())
    with pytest.raises(KeyboardInterrupt):
        store.register_experiment("second", {})
    store.register_experiment("third", {})
    committed = ["second"] if statement == "DETACH" else []  # its transaction had committed
    assert sorted(r[0] for r in store.fetchall("SELECT experiment FROM experiments")) == [
        "exp",
        *committed,
        "third",
    ]
    assert [key for key in connection._FILES if key[1] == store.path] == []
    assert _seen_from_another_process(store.path) == "free"
