"""Short DuckDB connections to the lineage catalog: a local file, or a Postgres database.

A catalog target is a DuckDB file path (the local profile), or a ``postgresql://`` URI (the server profile,
docs/deployment.md): DuckDB then attaches that database through its postgres extension, shipped as a PyPI
package (nothing is downloaded at run time), and the same SQL runs on Postgres tables in Postgres
transactions, so several processes and machines write lineage at once.


DuckDB allows one writing process per database file: while a process holds the file open, another
process's ``connect`` fails with ``IOException: Could not set lock on file ...``. Dagster runs each step
in its own process, so the store never keeps the file open: every read or write attaches it to the
process's in-memory DuckDB, does one transaction and detaches it, which releases the lock within
milliseconds. Threads of one process take turns (a process-wide lock), since DuckDB refuses two threads
attaching one file at once. A caller that
meets the lock retries with exponential backoff (plus jitter, so two waiting writers do not retry in lockstep)
for a bounded time, then raises ``StoreLockedError`` naming the file. A burst of transactions (a stage's
lineage reads, or its records) may share one connection (`held_connection`): opening one costs ~2 ms
(`open_catalog`).
Write-write conflicts between connections inside one process (``TransactionException``) are retried the same
way: the whole transaction re-runs.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb

from creditline.store.errors import (
    CatalogDamagedError,
    CatalogTooNewError,
    CatalogUnreachableError,
    StoreLockedError,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait for a locked database file, and how often to try again."""

    timeout_s: float = 30.0
    """Total time to keep trying before raising ``StoreLockedError``."""
    initial_delay_s: float = 0.02
    """First pause after a failed attempt; doubles after each failure."""
    max_delay_s: float = 0.5
    """Ceiling on a single pause, so a lock released late is noticed within half a second."""


POSTGRES_SCHEMES = ("postgresql://", "postgres://")

_POSTGRES_CONFLICTS = (
    "could not serialize access",  # 40001: a concurrent transaction changed the rows this one read
    "deadlock detected",  # 40P01
    "duplicate key value violates unique constraint",  # 23505: two upserts of one new key at once
)
"""Postgres errors that mean "another writer got there first": the whole transaction is retried, and
then sees the other's row."""


def is_postgres(target: str) -> bool:
    """True when the catalog ``target`` names a Postgres database rather than a DuckDB file."""
    return target.startswith(POSTGRES_SCHEMES)


@contextlib.contextmanager
def open_catalog(target: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB connection whose default catalog is ``target`` (a file, or Postgres), closed at the block's
    end.

    Both are handed out as cursors of an in-memory DuckDB the process keeps. Creating a DuckDB instance costs
    ~6.5 ms (it loads its statically linked extensions, and no setting skips that), attaching a file ~1.5 ms.
    A file is attached to the process's DuckDB (`_host`) for the block and detached at its end, which releases
    its lock for other processes (`_attach_file`). Postgres is attached once per process to a DuckDB of its
    own (`_attached`, ~130 ms) and stays: each cursor is a transaction and Postgres session of its own.
    """
    if is_postgres(target):
        con = _attached(target, os.getpid()).cursor()
        with con:
            con.execute("USE lineage")
            yield con
        return
    with CATALOG_TURN, _attach_file(target) as alias:
        with _host(os.getpid()).cursor() as con:
            con.execute(f"USE {alias}")
            yield con


CHECKPOINT_SETTINGS = {"disabled_compression_methods": "fsst"}
"""How the catalog's checkpoints compress (every detach after a write checkpoints). Without FSST: trying FSST
on each string column of every table a write touched took ~10 ms of a detach's ~16 (an artifact, a lineage
edge and a run recorded, then detached: 16.1 ms against 6.2, this project's catalog after 15 rounds,
2026-11-29), and it chose FSST for none of them; dictionary and run-length encodings are still tried. The
cost: string columns FSST would have compressed (paths, at a few thousand rows) are stored uncompressed; a
catalog of ~6,600 runs and ~10,800 artifacts takes 11.0 MB against 10.5 (docs/benchmarks.md)."""


ROW_GROUP_ROWS = 2048
"""The catalog file's row groups hold at most this many rows (DuckDB's smallest: one vector), not DuckDB's
default 122,880. New rows go into a table's last row group, and the checkpoint a detach makes after a write
rewrites that whole row group: with the default, every table below 122,880 rows is one row group, so a write's
checkpoint grew with the table. A stage's records session (an artifact, its edge and a run, then detached)
on a catalog of 2,400 rounds' rows: 20–21 ms with this, 56 ms with the default; after 6 rounds 15 ms either
way (2026-11-29, `make bench-catalog`). Given at every attach: DuckDB does not keep it in the file (a
checkpoint without it may merge the row groups again). In a catalog written with the default, the rows
already there stay in their large row group, and new rows go into new small ones."""


@functools.lru_cache(maxsize=2)
def _host(pid: int) -> duckdb.DuckDBPyConnection:
    """This process's in-memory DuckDB, the catalog files are attached to (keyed by pid: a forked child
    makes its own), with `CHECKPOINT_SETTINGS`."""
    host = duckdb.connect()
    for name, value in CHECKPOINT_SETTINGS.items():
        host.execute(f"SET GLOBAL {name} = '{value}'")
    return host


_FILES: dict[tuple[int, str], tuple[str, int]] = {}
"""(pid, catalog file's absolute path) -> (its alias in `_host`, the open blocks using it). (alias, 0): maybe
attached (an ATTACH or DETACH was interrupted), checked at the next open. Keyed by pid: a child forked inside
a block starts with none."""
_ALIASES = itertools.count(1)


@contextlib.contextmanager
def _attach_file(target: str) -> Iterator[str]:
    """The alias `target` is attached under in `_host` for the block: attached by the outermost block on it
    (which takes the file's lock, or fails as `duckdb.connect` would) and detached when that block ends (which
    checkpoints its write-ahead log and releases the lock). The caller holds `CATALOG_TURN`.

    An interrupt (Ctrl-C, SIGTERM) can land while DuckDB attaches or detaches, after or before the call took
    effect: the entry is left at (alias, 0) and the next open asks DuckDB whether the alias is attached,
    reusing it or attaching anew, so the process's later calls work either way."""
    key = (os.getpid(), os.path.abspath(target))
    host = _host(key[0])
    alias, users = _FILES.get(key, ("", 0))
    if users == 0 and not (alias and _is_attached(host, alias)):
        alias = f"catalog_{next(_ALIASES)}"
        _FILES[key] = (alias, 0)
        try:
            _attach(host, target, alias)
        except Exception:  # refused by DuckDB (the file locked, damaged): not attached
            del _FILES[key]
            raise
    _FILES[key] = (alias, users + 1)
    try:
        yield alias
    finally:
        users = _FILES[key][1] - 1
        _FILES[key] = (alias, users)
        if users == 0:
            host.execute(f"DETACH {alias}")
            del _FILES[key]


def _is_attached(host: duckdb.DuckDBPyConnection, alias: str) -> bool:
    found = host.execute("SELECT 1 FROM duckdb_databases() WHERE database_name = ?", [alias]).fetchone()
    return found is not None


def _attach(host: duckdb.DuckDBPyConnection, target: str, alias: str) -> None:
    """ATTACH `target` as `alias`; a damaged or newer DuckDB's file is refused in one line naming it."""
    quoted = target.replace("'", "''")  # ATTACH takes no parameters: a quoted literal
    try:
        host.execute(f"ATTACH '{quoted}' AS {alias} (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
    except duckdb.Error as error:
        if "created with an newer version" in str(error) or "newer version of DuckDB" in str(error):
            raise CatalogTooNewError(target, duckdb.__version__) from None
        if _is_damaged(error) and os.path.isfile(target):
            raise CatalogDamagedError(target, str(error).splitlines()[0]) from None
        raise


_DAMAGED = ("could not read enough bytes", "not a valid duckdb database", "corrupt", "checksum")
"""Words of DuckDB's errors on opening a file that is truncated, overwritten or not a catalog at all."""


def _is_damaged(error: BaseException) -> bool:
    """True when opening the catalog file failed because its bytes are damaged (never for a lock, a permission
    or a newer DuckDB's file)."""
    text = str(error).lower()
    if is_lock_error(error) or "permission denied" in text:
        return False
    return isinstance(error, duckdb.SerializationException) or any(word in text for word in _DAMAGED)


@functools.lru_cache(maxsize=8)
def _attached(target: str, pid: int) -> duckdb.DuckDBPyConnection:
    """This process's DuckDB with Postgres ``target`` attached (keyed by pid: a forked child attaches
    anew)."""
    con = duckdb.connect()
    try:
        con.execute(f"LOAD '{_postgres_extension()}'")
        quoted = target.replace("'", "''")  # ATTACH takes no parameters: a quoted literal
        con.execute(f"ATTACH '{quoted}' AS lineage (TYPE postgres)")
    except duckdb.Error as error:  # DuckDB's message carries the URI, password included
        con.close()
        from creditline.config.deployment import redact

        raise CatalogUnreachableError(str(error).replace(target, redact(target))) from None
    except BaseException:
        con.close()
        raise
    return con


def _postgres_extension() -> str:
    """The postgres extension's file from the `duckdb-extension-postgres-scanner` package (the `server`
    extra)."""
    try:
        import duckdb_extension_postgres_scanner as package
    except ImportError as error:
        raise ImportError(
            "a postgresql:// lineage catalog needs DuckDB's postgres extension: "
            "pip install 'creditline[server]'"
        ) from error
    version = duckdb.__version__
    path = Path(package.__file__).parent / "extensions" / f"v{version}" / "postgres_scanner.duckdb_extension"
    if not path.exists():
        raise ImportError(f"duckdb-extension-postgres-scanner has no build for DuckDB {version} ({path})")
    return path.as_posix()


def is_lock_error(error: BaseException) -> bool:
    """True for errors that mean "someone else holds the database right now": worth retrying."""
    if any(conflict in str(error) for conflict in _POSTGRES_CONFLICTS):
        return True
    if isinstance(error, duckdb.IOException):
        return "could not set lock" in str(error).lower()  # not "block" in a corrupt file's message
    if isinstance(error, duckdb.Error) and "unique file handle conflict" in str(error).lower():
        return True  # another thread of this process was attaching the same file at that instant
    return isinstance(error, duckdb.TransactionException) and "conflict" in str(error).lower()


def run_transaction(path: str, work: Callable[[duckdb.DuckDBPyConnection], T], policy: RetryPolicy) -> T:
    """Open ``path``, run ``work`` inside one transaction, commit, close; retry the whole on lock errors.

    ``work`` may run several times, but each failed attempt is rolled back, so it only has to be a
    function of the database state, not idempotent on its own.
    """
    return _with_retry(path, lambda: _attempt(path, work), policy)


CATALOG_TURN = threading.RLock()
"""Threads of one process take turns: two threads attaching one file at the same instant make DuckDB fail
("Unique file handle conflict"), e.g. the experiment lease's heartbeat beside an asset's write."""


def _attempt(path: str, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    with CATALOG_TURN, open_catalog(path) as con:
        return run_in_transaction(con, work)


def run_in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    """``work`` inside one transaction on an open connection: committed, or rolled back if it raises."""
    with one_transaction(con):
        return work(con)


@contextlib.contextmanager
def one_transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block as one transaction on an open connection: committed at its end, rolled back if it raises."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


@contextlib.contextmanager
def held_connection(path: str, policy: RetryPolicy) -> Iterator[duckdb.DuckDBPyConnection]:
    """One connection kept open for a burst of transactions (opening one costs ~2 ms), then closed.

    The file stays locked against other processes for the burst, so a burst must be short: a stage's
    lineage reads, or its records, never the work between them. This thread holds the process's turn.
    """
    with CATALOG_TURN, contextlib.ExitStack() as stack:
        con = _with_retry(path, lambda: stack.enter_context(open_catalog(path)), policy)
        _HELD.paths = [*getattr(_HELD, "paths", []), path]
        try:
            yield con
        finally:
            _HELD.paths = _HELD.paths[:-1]


_HELD = threading.local()
""".paths: the catalogs whose connection this thread holds open (`held_connection`)."""


def holding() -> list[str]:
    """The catalog files this thread keeps locked right now (open `held_connection` blocks): for asserting
    that no slow work (files, hashing, MLflow, training) runs while other processes are locked out."""
    return list(getattr(_HELD, "paths", []))


def _with_retry(path: str, attempt: Callable[[], T], policy: RetryPolicy) -> T:
    start = time.monotonic()
    delay = policy.initial_delay_s
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except duckdb.Error as error:
            if not is_lock_error(error):
                raise
            waited = time.monotonic() - start
            if waited >= policy.timeout_s:
                raise StoreLockedError(path, waited, attempts, error) from error
            pause = min(delay, policy.max_delay_s, policy.timeout_s - waited)
            time.sleep(pause * random.uniform(0.5, 1.0))
            delay *= 2
