"""Temp files and folders left behind by writers that died, found and cleared.

Every atomic write in ``files`` goes through a hidden sibling of its destination named
``.{name}.{tag}-{pid}-{tid}-{n}`` (``files._temp_sibling``): tag ``tmp`` for the file or folder being
written, ``old`` for a folder moved aside while its replacement is renamed in. A writer that finishes
renames or deletes its sibling; one that is killed (OOM, pre-emption, SIGKILL) leaves it there for ever,
costing disk and confusing whoever lists the folder. The pid in the name says whose it was, so the
writer is dead, and the entry an orphan, when

- no process has that pid (or only a zombie does), or
- the process that has it started after the entry last changed: the pid was reused. The entry's time is
  the later of its mtime and ctime (a rename sets ctime, and an ``old`` folder keeps the mtime it had
  as the destination); the process's start is ``/proc/<pid>/stat`` field 22 (clock ticks since boot)
  plus the boot time (``btime`` in ``/proc/stat``), known to about a second, hence a small margin.

A live pid, this process's included, counts as alive. Liveness is judged on this host: a data root
that writers on several hosts share needs those hosts' writers stopped before ``remove_orphans`` runs.

An ``old`` folder whose destination is missing is not rubbish: its writer died between moving the
previous version aside and renaming the new one in, so it holds the only copy of the recorded artifact.
``remove_orphans`` renames it back instead of deleting it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from creditline.liveness import boot_time, start_ticks, started_at
from creditline.store.records import Problem

_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<tag>tmp|old)-(?P<pid>\d+)-(?P<tid>\d+)-(?P<n>\d+)$")
_START_MARGIN_S = 2.0
"""How much older than its pid's process an entry must be to call the pid reused: ``btime`` is whole
seconds and the start time clock ticks, so the computed start can be up to about a second late."""

OrphanAction = Literal["delete", "restore"]


@dataclass(frozen=True)
class Orphan:
    """A temp file or folder whose writer is dead."""

    path: str
    """The temp entry itself."""
    target: str
    """The destination it was written for (same folder, name without the dot and tag)."""
    tag: Literal["tmp", "old"]
    """"tmp": a write that never finished; "old": a folder moved aside during a replacement."""
    pid: int
    """The writer's process id, from the name."""
    is_dir: bool
    bytes: int
    """Total size of the file, or of every file under the folder."""
    reason: str
    """Why the writer is judged dead: "no process has pid N", "pid N is a zombie", "pid N was reused"."""
    action: OrphanAction
    """What ``remove_orphans`` does: "delete", or "restore" (rename back an ``old`` folder whose
    destination is missing)."""


def find_orphans(data_root: str | os.PathLike[str]) -> list[Orphan]:
    """Every temp entry under ``data_root`` whose writer is dead, sorted by path; [] if there is none.

    A temp folder's contents are not searched: they go with it.
    """
    boot_time = _boot_time()
    found: list[Orphan] = []
    for folder, dirnames, filenames in os.walk(data_root):
        temp_dirs = [d for d in dirnames if _TEMP_NAME.match(d)]
        dirnames[:] = [d for d in dirnames if d not in temp_dirs]
        for name in [*temp_dirs, *filenames]:
            orphan = _orphan(Path(folder) / name, boot_time)
            if orphan is not None:
                found.append(orphan)
    return sorted(found, key=lambda o: o.path)


def remove_orphans(data_root: str | os.PathLike[str]) -> list[Orphan]:
    """Clear every orphan under ``data_root``: delete it, or rename an ``old`` folder back (see module).

    Returns what was cleared; an entry that vanished meanwhile (another cleaner) is skipped.
    """
    cleared = []
    for orphan in find_orphans(data_root):
        done: OrphanAction = "delete"  # also for a restore whose destination reappeared meanwhile
        try:
            if orphan.action == "restore" and not os.path.lexists(orphan.target):
                os.rename(orphan.path, orphan.target)
                done = "restore"
            elif orphan.is_dir:
                shutil.rmtree(orphan.path)
            else:
                os.unlink(orphan.path)
        except FileNotFoundError:
            continue
        cleared.append(dataclasses.replace(orphan, action=done))
    return cleared


def orphan_problems(data_root: str | os.PathLike[str]) -> list[Problem]:
    """``find_orphans`` as ``verify`` problems of kind "orphan", each naming its path under ``data_root``."""
    root = Path(data_root)
    problems = []
    for orphan in find_orphans(root):
        where = Path(orphan.path).relative_to(root).as_posix()
        what = (
            f"temp {'folder' if orphan.is_dir else 'file'} ({orphan.bytes} bytes) "
            f"for {Path(orphan.target).name}"
        )
        if orphan.tag == "old":
            what = f"previous version of {Path(orphan.target).name}, moved aside ({orphan.bytes} bytes)"
        fix = "remove_orphans deletes it"
        if orphan.action == "restore":
            fix = (
                f"{Path(orphan.target).name} is missing and this is its only copy; "
                "remove_orphans renames it back"
            )
        detail = f"{where}: {what}, left by a dead writer ({orphan.reason}); {fix}"
        problems.append(Problem("orphan", orphan.path, "", None, detail))
    return problems


def _orphan(path: Path, boot_time: float | None) -> Orphan | None:
    match = _TEMP_NAME.match(path.name)
    if match is None:
        return None
    try:
        stat = path.lstat()
    except FileNotFoundError:  # finished or cleared while we looked
        return None
    pid = int(match["pid"])
    reason = _dead_writer(pid, max(stat.st_mtime, stat.st_ctime), boot_time)
    if reason is None:
        return None
    is_dir = path.is_dir() and not path.is_symlink()
    target = path.with_name(match["name"])
    tag: Literal["tmp", "old"] = "old" if match["tag"] == "old" else "tmp"
    restore = tag == "old" and is_dir and not os.path.lexists(target)
    return Orphan(
        path=str(path),
        target=str(target),
        tag=tag,
        pid=pid,
        is_dir=is_dir,
        bytes=_size(path) if is_dir else stat.st_size,
        reason=reason,
        action="restore" if restore else "delete",
    )


def _dead_writer(pid: int, changed_at: float, booted: float | None) -> str | None:
    """Why the process ``pid`` cannot be the writer of an entry last changed at ``changed_at``, or None."""
    ticks = start_ticks(pid) if pid > 0 else None
    if ticks is None:
        return f"no process with pid {pid} is running"
    started = started_at(ticks, booted)
    if started is not None and changed_at < started - _START_MARGIN_S:
        return f"pid {pid} was reused (its process started after the entry last changed)"
    return None


def _boot_time() -> float | None:
    return boot_time()


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                continue
    return total
