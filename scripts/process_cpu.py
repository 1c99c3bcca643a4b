"""Where a command's CPU goes, by kind of process: the processes it starts, and those they leave behind.

`/usr/bin/time make test` counts only the processes each parent waited for; servers that daemonise
(Postgres), processes reparented when their parent died, and engine processes that outlive a test are left
out. This runs the command and reads `/proc` every `--interval` seconds: every process that started after the
command (whatever its parent), its CPU (user + system, all threads) as last seen. Then it prints the CPU by
kind of process, largest first, beside the wall time and the capacity of the machine's cores.

A process's kind is its program and what it runs: `python -m MODULE`, `python SCRIPT`, `python -c` (the code's
first characters), or the program's name; for a process that renames itself after it started (vLLM's engine
core and workers set their title), its new name in brackets. A process that lived less than one interval may
be missed, and one that started meanwhile outside the command (a shell of yours) is counted: run it on an
otherwise quiet machine. It needs no venv (the system's python3 runs it before `make test` builds them).

    python3 scripts/process_cpu.py [--interval 1] [--top 30] -- make test
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the repository, whose liveness module is stdlib only
from creditline.liveness import stat_fields  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks a second: the unit of `/proc/PID/stat`'s times."""
PYTHON_FLAGS = ("-u", "-B", "-E", "-s", "-S", "-I", "-O", "-q")
"""Python's options that take no argument, skipped to find what the interpreter runs."""


@dataclass
class Seen:
    kind: str
    comm: str
    """The process's name when first seen: if it changes, the process retitled itself."""
    cpu_s: float = 0.0
    """User + system seconds, all threads, at the last reading."""


def read_stat(pid: str) -> tuple[int, float] | None:
    """(start time in ticks since boot, CPU seconds) of a process, a zombie's final ones included; None if it
    is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[19]), (int(fields[11]) + int(fields[12])) / TICKS)


def process_kind(argv: list[str], comm: str) -> str:
    """A short name for what a process runs (see the module docstring)."""
    if not argv or not argv[0].strip():
        return f"[{comm}]"
    program = Path(argv[0]).name
    if re.fullmatch(r"python[\d.]*", program):
        rest = argv[1:]
        while rest and (rest[0] in PYTHON_FLAGS or rest[0].startswith("-X")):
            rest = rest[2:] if rest[0] == "-X" else rest[1:]  # `-X opt` takes the next argument; `-Xopt` not
        if len(rest) >= 2 and rest[0] == "-m":
            return f"python -m {rest[1]}"
        if len(rest) >= 2 and rest[0] == "-c":
            return "python -c " + " ".join(rest[1].split())[:60]
        if rest:
            return f"python {Path(rest[0]).name}"
        return "python"
    return program


def comm_of(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def first_sight(pid: str) -> Seen:
    comm = comm_of(pid)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return Seen("?", comm)
    return Seen(process_kind([a.decode(errors="replace") for a in argv if a], comm), comm)


def sample(since_ticks: int, seen: dict[tuple[str, int], Seen]) -> None:
    """Read every process that started at or after `since_ticks` into `seen` (keyed by pid and start)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = read_stat(pid)
        if stat is None or stat[0] < since_ticks:
            continue
        key = (pid, stat[0])
        if key not in seen:
            seen[key] = first_sight(pid)
        elif (comm := comm_of(pid)) not in (seen[key].comm, "?"):  # retitled (vLLM's engine processes)
            seen[key].kind, seen[key].comm = f"[{comm}]", comm
        seen[key].cpu_s = stat[1]


def boot_ticks_now() -> int:
    """Now, in clock ticks since boot (the clock of a process's start time)."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * TICKS)


def table(seen: dict[tuple[str, int], Seen], top: int) -> list[str]:
    by_kind: dict[str, list[float]] = defaultdict(list)
    for process in seen.values():
        by_kind[process.kind].append(process.cpu_s)
    rows = sorted(by_kind.items(), key=lambda item: -sum(item[1]))
    lines = [f"{'CPU s':>9} {'procs':>6} {'max s':>7}  kind"]
    for kind, cpus in rows[:top]:
        lines.append(f"{sum(cpus):9.1f} {len(cpus):6d} {max(cpus):7.1f}  {kind}")
    if len(rows) > top:
        left = [c for _, cpus in rows[top:] for c in cpus]
        lines.append(f"{sum(left):9.1f} {len(left):6d} {max(left):7.1f}  ({len(rows) - top} other kinds)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between readings of /proc")
    parser.add_argument("--top", type=int, default=30, help="kinds of process to list")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: process_cpu.py [options] -- COMMAND ...")
    since, started, before = boot_ticks_now(), time.monotonic(), os.times()
    seen: dict[tuple[str, int], Seen] = {}
    child = subprocess.Popen(command)
    while child.poll() is None:
        sample(since, seen)
        time.sleep(args.interval)
    sample(since, seen)  # the leftovers still running at the end
    wall = time.monotonic() - started
    after = os.times()
    waited = after.children_user + after.children_system - before.children_user - before.children_system
    total = sum(p.cpu_s for p in seen.values())
    print("\n".join(table(seen, args.top)))
    print(f"{total:.0f} s of CPU in {len(seen)} processes seen, {wall:.0f} s of wall time on {os.cpu_count()} "
          f"cores ({wall * (os.cpu_count() or 1):.0f} core-seconds); the processes waited for: "
          f"{waited:.0f} s; exit {child.returncode}")  # fmt: skip
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
