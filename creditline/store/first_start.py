"""One process at a time creates and migrates a data root's embedded stores.

Dagster's sqlite storages and MLflow's sqlite tracking store create their tables and stamp their schema
version (alembic) on first use, with no lock of their own. Two `creditline` commands started at the same
moment on an empty root both do it: Dagster's run storage ends up with two `alembic_version` rows (one
process stamps the head, the other, seeing the tables but no stamp yet, stamps an older revision), after
which every later start fails; MLflow's second migration fails on the first one's
`_alembic_tmp_experiments` table. `first_start_lock` serialises that creation: an exclusive `flock` on
`<data_root>/.first-start.lock`, held only while a store is opened (milliseconds once the stores exist).
The kernel drops the lock when its holder dies, so a killed first start never leaves it taken.

The lock covers processes on hosts that share the data root's file system through a local mount; a
Postgres instance or tracking server migrates its own schema and needs no lock from us.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".first-start.lock"


@contextlib.contextmanager
def first_start_lock(data_root: str | Path) -> Iterator[None]:
    """Hold the data root's first-start lock for the `with` block (blocks while another process holds it)."""
    root = Path(data_root)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
