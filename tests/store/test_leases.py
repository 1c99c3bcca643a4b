"""One writer per experiment: a live holder refuses a second, a dead holder is taken over."""

import os
import signal
import subprocess
import sys
import time

import pytest

from creditline.liveness import ProcessId, hostname, is_alive, this_process
from creditline.store import LineageStore
from creditline.store.leases import LeaseHeldError, acquire_lease, hold_lease, lease_holder, release_lease

HOLD = """
import sys, time
from creditline.store import LineageStore
from creditline.store.leases import acquire_lease
acquire_lease(LineageStore(sys.argv[1]), "exp")
print("held", flush=True)
time.sleep(600)
"""


def test_this_process_is_alive_and_a_vanished_or_reused_pid_is_not():
    me = this_process()
    assert is_alive(me) is True
    assert is_alive(ProcessId(hostname(), me.pid, me.start_ticks + 1)) is False  # same pid, other start
    assert is_alive(ProcessId(hostname(), 2**22 + 7, 1)) is False
    assert is_alive(ProcessId("another-host", me.pid, me.start_ticks)) is None
    assert ProcessId.parse(str(me)) == me


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while (
        not os.path.exists(f"/proc/{child.pid}")
        or open(f"/proc/{child.pid}/stat").read().split(")")[1].split()[0] != "Z"
    ):
        time.sleep(0.05)  # exited, not yet waited for: a zombie
    assert is_alive(ProcessId(hostname(), child.pid, 0)) is False
    child.wait()


def test_a_live_holder_refuses_and_a_killed_holder_is_taken_over(tmp_path):
    path = tmp_path / "lineage.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = LineageStore(path)
        with pytest.raises(LeaseHeldError, match=f"pid {holder.pid} on {hostname()}"):
            acquire_lease(store, "exp")
        assert f"pid {holder.pid}" in lease_holder(store, "exp")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        lease = acquire_lease(store, "exp")
        assert lease.replaced is not None and f"pid {holder.pid}" in lease.replaced
        assert lease_holder(store, "exp") is not None  # ours now
        release_lease(store, lease)
        assert lease_holder(store, "exp") is None
    finally:
        holder.kill()


def test_hold_lease_heartbeats_and_releases(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    with hold_lease(store, "exp", heartbeat_s=0.05) as lease:
        first = store.fetchone("SELECT heartbeat_at FROM leases WHERE experiment = 'exp'")[0]
        time.sleep(0.3)
        assert store.fetchone("SELECT heartbeat_at FROM leases WHERE experiment = 'exp'")[0] > first
        assert lease.replaced is None
        again = acquire_lease(store, "exp")  # the same process may re-enter its own lease
        assert again.replaced is None
    assert lease_holder(store, "exp") is None


LOCK_FILE = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])  # another process holds the catalog file open, so it is locked
print("locked", flush=True)
time.sleep(600)
"""


def test_an_interrupt_inside_the_block_is_not_masked_by_a_release_that_fails(tmp_path):
    """Ctrl-C ends the block while another process holds the catalog: the release fails (locked), and the
    caller still sees the interrupt, not the lock error; the lease is left for the next run to reclaim."""
    from creditline.store.connection import RetryPolicy

    path = tmp_path / "lineage.duckdb"
    store = LineageStore(path, retry=RetryPolicy(timeout_s=0.3))
    locker = None
    try:
        with pytest.raises(KeyboardInterrupt), hold_lease(store, "exp", heartbeat_s=60):
            locker = subprocess.Popen([sys.executable, "-c", LOCK_FILE, str(path)], stdout=subprocess.PIPE,
                                      text=True)  # fmt: skip
            assert locker.stdout.readline() == "locked\n"
            raise KeyboardInterrupt
    finally:
        if locker is not None:
            locker.kill()
            locker.wait()
    assert store.fetchone("SELECT holder FROM leases WHERE experiment = 'exp'") == (str(this_process()),)


def test_a_stale_heartbeat_from_another_host_is_taken_over(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.execute("INSERT INTO leases VALUES ('exp', 'elsewhere:1:1', now() - INTERVAL 2 MINUTE, "
                   "now() - INTERVAL 2 MINUTE)", [])  # fmt: skip
    lease = acquire_lease(store, "exp", ttl_s=60)
    assert "elsewhere" in lease.replaced
