"""Is the process that wrote this still alive? Identities that survive pid reuse.

A killed writer leaves traces (a Dagster run marked STARTED, a pool slot, an experiment lease, a
temp file); whoever starts next must tell a dead writer from a slow one. A pid alone cannot: the
kernel reuses pids. So a process is identified by (host, pid, start time), the start time read from
`/proc/<pid>/stat` (field 22, clock ticks since boot). The holder is alive when a process with that
pid exists on this host and started at the same tick. On another host nothing can be checked
(`is_alive` returns None) and callers fall back to heartbeats.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class ProcessId:
    host: str
    pid: int
    start_ticks: int
    """Start time of the process in clock ticks since boot; 0 where /proc is not available."""

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start_ticks}"

    @classmethod
    def parse(cls, text: str) -> ProcessId:
        """The inverse of `str()`; raises ValueError on anything else."""
        host, pid, ticks = text.rsplit(":", 2)
        return cls(host, int(pid), int(ticks))

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat; None when no such process runs (a zombie has stopped running).

    Without /proc (not Linux) only existence can be checked: 0 for a process that exists.
    """
    if not os.path.isdir("/proc"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return 0
    fields = stat_fields(pid)
    if fields is None or fields[0] in (
        "Z",
        "X",
    ):  # zombie or dead: exited, waiting to be reaped by its parent
        return None
    return int(fields[19])


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: index 0 is field 3 of proc(5) (the state), so
    field N is index N - 3 (utime 14 → 11, stime 15 → 12, starttime 22 → 19); None when no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) is in parentheses and may contain spaces: split after the last ")"
    return stat.rsplit(")", 1)[1].split()


def descendants(pid: int | str) -> dict[str, list[str]]:
    """{pid: `stat_fields`} of every living process below `pid` (children, their children, ...), from one read
    of /proc; empty without /proc."""
    seen: dict[str, list[str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return seen
    for entry in entries:
        if entry.isdigit() and (fields := stat_fields(entry)) is not None:
            seen[entry] = fields
    tree, below = {str(pid)}, dict[str, list[str]]()
    while found := {p: f for p, f in seen.items() if f[1] in tree and p not in tree}:  # field 4: the parent
        tree |= found.keys()
        below |= found
    return below


def boot_time() -> float | None:
    """When this host booted (epoch seconds, /proc/stat `btime`), or None without /proc."""
    try:
        with open("/proc/stat") as fh:
            return next((float(line.split()[1]) for line in fh if line.startswith("btime ")), None)
    except OSError:
        return None


def started_at(ticks: int, booted: float | None) -> float | None:
    """Epoch seconds at which a process with `start_ticks` = ticks started (None if unknowable)."""
    if booted is None or ticks == 0:
        return None
    return booted + ticks / os.sysconf("SC_CLK_TCK")


@cache
def hostname() -> str:
    return socket.gethostname()


def this_process() -> ProcessId:
    return ProcessId(hostname(), os.getpid(), start_ticks(os.getpid()) or 0)


def is_alive(process: ProcessId) -> bool | None:
    """True/False on this host; None for a process on another host (unknowable from here)."""
    if process.host != hostname():
        return None
    ticks = start_ticks(process.pid)
    if ticks is None:
        return False
    return ticks == process.start_ticks or 0 in (ticks, process.start_ticks)
