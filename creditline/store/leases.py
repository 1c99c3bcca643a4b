"""One writer per experiment: a lease row in the lineage store, with holder and heartbeat.

`creditline run` holds its experiment's lease for as long as it runs rounds; a second `run` of the
same experiment is refused with the holder's name, instead of both training every round. A holder
that died (its process is gone from this host, or its heartbeat is older than the time to live for a
holder on another host) is taken over, and the taker is told whom it replaced. A daemon thread
renews the heartbeat while the lease is held.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from creditline.errors import CreditlineError
from creditline.liveness import ProcessId, is_alive, this_process
from creditline.store.lineage import LineageStore

LEASE_TTL_S = 60.0
"""A heartbeat older than this frees the lease of a holder whose liveness cannot be checked."""
HEARTBEAT_S = 10.0


class LeaseHeldError(CreditlineError, RuntimeError):
    """The experiment's lease belongs to another live process."""


@dataclass(frozen=True)
class Lease:
    experiment: str
    holder: ProcessId
    replaced: str | None
    """The dead holder this lease was taken over from, described for a person; None if it was free."""


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _holder_state(holder: str, heartbeat_at: datetime, ttl_s: float) -> tuple[bool, str]:
    """(alive, description) of a recorded holder."""
    try:
        process = ProcessId.parse(holder)
    except ValueError:
        return False, f"unreadable holder {holder!r}"
    age = (_now() - heartbeat_at).total_seconds()
    alive = is_alive(process)
    if alive is None:
        alive = age <= ttl_s
    return alive, f"{process.describe()}, last heartbeat {age:.0f} s ago"


def acquire_lease(store: LineageStore, experiment: str, ttl_s: float = LEASE_TTL_S) -> Lease:
    """Take `experiment`'s lease for this process; raise LeaseHeldError if a live process holds it."""
    me = this_process()

    def work(con: duckdb.DuckDBPyConnection) -> str | None:
        row = con.execute(
            "SELECT holder, heartbeat_at FROM leases WHERE experiment = ?", [experiment]
        ).fetchone()
        replaced = None
        if row is not None and row[0] != str(me):
            alive, description = _holder_state(row[0], row[1], ttl_s)
            if alive:
                raise LeaseHeldError(
                    f"experiment {experiment!r} is being run by another `creditline run` ({description}); "
                    "wait for it to finish, or stop it first"
                )
            replaced = description
        now = _now()
        con.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?)", [experiment, str(me), now, now])
        return replaced

    return Lease(experiment, me, store.transaction(work))


def renew_lease(store: LineageStore, lease: Lease) -> bool:
    """Refresh the heartbeat; False if the lease is no longer ours (it was taken over)."""

    def work(con: duckdb.DuckDBPyConnection) -> bool:
        row = con.execute(  # no UPDATE ... RETURNING: DuckDB's postgres tables do not support it
            "SELECT count(*) FROM leases WHERE experiment = ? AND holder = ?",
            [lease.experiment, str(lease.holder)],
        ).fetchone()
        assert row is not None  # count(*) always returns one row
        ours = row[0]
        if ours:
            con.execute(
                "UPDATE leases SET heartbeat_at = ? WHERE experiment = ? AND holder = ?",
                [_now(), lease.experiment, str(lease.holder)],
            )
        return bool(ours)

    return store.transaction(work)


def release_lease(store: LineageStore, lease: Lease) -> None:
    store.transaction(
        lambda con: con.execute(
            "DELETE FROM leases WHERE experiment = ? AND holder = ?", [lease.experiment, str(lease.holder)]
        )
    )


def lease_holder(store: LineageStore, experiment: str, ttl_s: float = LEASE_TTL_S) -> str | None:
    """A description of the live holder of `experiment`'s lease, or None when nobody live holds it."""
    row = store.fetchone("SELECT holder, heartbeat_at FROM leases WHERE experiment = ?", [experiment])
    if row is None:
        return None
    alive, description = _holder_state(row[0], row[1], ttl_s)
    return description if alive else None


def dead_leases(store: LineageStore, ttl_s: float = LEASE_TTL_S) -> list[tuple[str, str]]:
    """(experiment, holder description) of every lease whose holder is gone."""
    rows = store.fetchall("SELECT experiment, holder, heartbeat_at FROM leases ORDER BY experiment")
    return [
        (experiment, description)
        for experiment, holder, beat in rows
        for alive, description in [_holder_state(holder, beat, ttl_s)]
        if not alive
    ]


def release_dead_leases(store: LineageStore, ttl_s: float = LEASE_TTL_S) -> list[str]:
    """Delete the leases of holders that are gone (each only if still held by that holder); say which."""
    lines = []
    for experiment, description in dead_leases(store, ttl_s):
        holder = store.fetchone("SELECT holder FROM leases WHERE experiment = ?", [experiment])
        if holder is None or _holder_state(holder[0], _now(), ttl_s)[0]:
            continue  # released or taken over meanwhile (a live taker's heartbeat is now)

        def delete(con: duckdb.DuckDBPyConnection, e: str = experiment, h: str = holder[0]) -> None:
            con.execute("DELETE FROM leases WHERE experiment = ? AND holder = ?", [e, h])

        store.transaction(delete)
        lines.append(
            f"released experiment {experiment!r}'s lease, "
            f"held by a `creditline run` that died ({description})"
        )
    return lines


@contextlib.contextmanager
def hold_lease(store: LineageStore, experiment: str, heartbeat_s: float = HEARTBEAT_S) -> Iterator[Lease]:
    """Hold the lease for the `with` block, renewing it every `heartbeat_s` in a daemon thread."""
    lease = acquire_lease(store, experiment)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(heartbeat_s):
            with contextlib.suppress(Exception):  # a missed beat is retried; the TTL is 6 beats
                renew_lease(store, lease)

    thread = threading.Thread(target=beat, name=f"lease-{experiment}", daemon=True)
    thread.start()
    try:
        yield lease
    except BaseException:
        stop.set()
        thread.join(timeout=5)
        # what ended the block (an interrupt, a failed round) is what the caller reports; a release that fails
        # now costs nothing lasting, since the next run reclaims a dead holder's lease
        with contextlib.suppress(Exception):
            release_lease(store, lease)
        raise
    stop.set()
    thread.join(timeout=5)
    release_lease(store, lease)
