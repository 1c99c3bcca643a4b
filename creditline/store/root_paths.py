"""Artifact paths kept relative to the data root, so that a moved or copied data root still finds its files.

A record's path is stored relative to the data root when it lies under it (`exp/r001/steps.parquet`), and as
given otherwise (a user's initial policy folder elsewhere, a URI). The store hands it back resolved against
the data root it was opened with, so every reader sees an absolute path, and a data root moved or copied as a
whole (catalog and files together) verifies clean where it is now. A Postgres catalog shared by machines
resolves the paths against each machine's own data root. No hash covers a record's path (a folder's hash
covers the names inside it; a round's commit lists content hashes), so only the path column changes.

Catalogs written before held absolute paths; `relative_path_updates` is their one-time migration
(`schema.create_schema`): a path under the data root it is opened with becomes relative to it, and so does a
path laid out as `<some old root>/<experiment>/rNNN/...` (`resources.lineage`'s layout), the root it was
written under before the data root moved.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any


def _is_local_absolute(path: str) -> bool:
    return "://" not in path and os.path.isabs(path)


def stored_path(path: str, data_root: str | None) -> str:
    """`path` as the catalog keeps it: relative (posix) when it lies under `data_root`, else unchanged.

    Only a normalised path is made relative (`os.path.join(data_root, stored)` gives it back exactly), and the
    match is by name, not by resolving links: what is read back is what was recorded.
    """
    if data_root is None or not _is_local_absolute(path) or os.path.normpath(path) != path:
        return path
    prefix = data_root.rstrip(os.sep) + os.sep
    return path[len(prefix) :].replace(os.sep, "/") if path.startswith(prefix) else path


def resolved_path(stored: str, data_root: str | None) -> str:
    """The path a reader uses: a relative `stored` joined to `data_root`; an absolute path or URI as is."""
    if data_root is None or stored == "" or "://" in stored or os.path.isabs(stored):
        return stored
    return os.path.join(data_root, *stored.split("/"))


def migrated_path(path: str, experiment: str, data_root: str) -> str:
    """What an absolute `path` of an older catalog becomes: relative to `data_root` when under it, else
    relative to the old root it was laid out under (`<old root>/<experiment>/rNNN/...`), else unchanged."""
    if not _is_local_absolute(path):
        return path
    relative = stored_path(os.path.normpath(path), data_root)
    if relative != os.path.normpath(path):
        return relative
    laid_out = re.fullmatch(rf"(.*)/({re.escape(experiment)}/r\d{{3}}(?:/.*)?)", path.replace(os.sep, "/"))
    return laid_out.group(2) if laid_out else path


def relative_path_updates(rows: Iterable[Sequence[Any]], data_root: str) -> list[list[Any]]:
    """[new path, experiment, round, kind, variant] for each (experiment, round, kind, variant, path) row of
    an older catalog whose path `migrated_path` changes."""
    updates = []
    for experiment, round_, kind, variant, path in rows:
        new = migrated_path(path, experiment, data_root)
        if new != path:
            updates.append([new, experiment, round_, kind, variant])
    return updates
