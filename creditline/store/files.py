"""Atomic writes and content hashes: how artifacts reach the disk.

Two guarantees make lineage trustworthy. First, a reader never sees a half-written file or folder: every
write goes to a temporary name beside its destination, is fsynced, and is renamed into place (a rename
within one folder is atomic on POSIX). Second, identity is content: an artifact is named by the sha256 of
its bytes (or, for a folder, of its sorted (relative path, file hash) pairs), so the hash is independent of
mtimes and file creation order. Parquet is written with fixed options and no pandas index, so the same
data gives the same bytes and therefore the same hash, and a re-run that reproduces a table is recognisable
as unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from creditline.faults import failpoint
from creditline.ids import canonical_hash
from creditline.store.records import FileRecord

if TYPE_CHECKING:  # imported by the Parquet functions when called: reading the catalog needs neither
    import pandas as pd
    import pyarrow as pa

_CHUNK = 1 << 20

# Fixed writer options: any change here changes every table's hash, so change them deliberately.
_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "version": "2.6",
    "data_page_version": "1.0",
    "use_dictionary": True,
    "write_statistics": True,
    "row_group_size": 1 << 20,
}

PathLike = str | os.PathLike[str]


# --- content hashes ----------------------------------------------------------------------------------


def hash_file(path: PathLike) -> str:
    """sha256 hex of a file's bytes, read in chunks so checkpoints need not fit in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def directory_manifest(path: PathLike) -> dict[str, str]:
    """{relative posix path: file sha256} of every file under ``path``, sorted by path."""
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    return dict(
        sorted((p.relative_to(root).as_posix(), hash_file(p)) for p in root.rglob("*") if p.is_file())
    )


def manifest_hash(manifest: dict[str, str]) -> str:
    """sha256 over the sorted (relative posix path, file sha256) pairs of a `directory_manifest`."""
    digest = hashlib.sha256()
    for rel, file_hash in sorted(manifest.items()):
        digest.update(rel.encode("utf-8") + b"\0" + file_hash.encode("ascii") + b"\n")
    return digest.hexdigest()


def hash_directory(path: PathLike) -> str:
    """sha256 over the sorted (relative posix path, file sha256) pairs of every file under ``path``.

    Only names and contents count: mtimes, permissions, creation order and empty folders do not.
    """
    return manifest_hash(directory_manifest(path))


def stat_fingerprint(path: PathLike) -> dict[str, list[int]]:
    """{relative posix path: [size, mtime_ns, inode, ctime_ns]} of a file ("" for the file itself) or of every
    file in a folder.

    Taken by the writer right after it hashed the bytes, and recorded with the artifact; a reader that finds
    the same fingerprint trusts the recorded hash instead of re-reading the bytes
    (`lineage.check_on_disk(quick=True)`), as git trusts its index. Any write changes mtime and ctime; a file
    replaced by a rename has another inode; ``utime`` can restore an mtime but not the ctime. A copy of the
    data root only costs a re-hash. Raises ``FileNotFoundError`` if ``path`` is neither a file nor a folder.
    """
    p = Path(path)
    if p.is_file():
        return {"": _fingerprint(p.stat())}
    if p.is_dir():
        return {
            f.relative_to(p).as_posix(): _fingerprint(f.stat()) for f in sorted(p.rglob("*")) if f.is_file()
        }
    raise FileNotFoundError(f"no file or directory at {p}")


def _fingerprint(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]


def hash_path(path: PathLike) -> str:
    """Content hash of a file or a folder; raises ``FileNotFoundError`` if it is neither."""
    p = Path(path)
    if p.is_file():
        return hash_file(p)
    if p.is_dir():
        return hash_directory(p)
    raise FileNotFoundError(f"no file or directory at {p}")


def config_hash(config: Any) -> str:
    """Short (16 hex) sha256 of a configuration's canonical JSON, to name and compare configs."""
    return canonical_hash(config)


# --- atomic writes -----------------------------------------------------------------------------------


_TEMP_COUNTER = itertools.count()


def _temp_sibling(path: Path, tag: str) -> Path:
    """A hidden name in the same folder as ``path`` (same file system, so rename is atomic).

    Unique per process (pid), thread and call (a counter): concurrent writers never share a temp name.
    """
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}-{threading.get_ident()}-{next(_TEMP_COUNTER)}")


def _fsync_directory(path: Path) -> None:
    """Persist a rename by syncing the folder entry; best effort where the OS does not allow it."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _atomic_file(path: PathLike) -> Iterator[tuple[Path, Any]]:
    """Yield (temp path, binary handle); on success fsync and rename over ``path``, else delete the temp."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(final, "tmp")
    try:
        with open(tmp, "wb") as fh:
            yield tmp, fh
            fh.flush()
            os.fsync(fh.fileno())
        failpoint(f"write:{final.name}")
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(final.parent)


def _to_arrow(frame: pd.DataFrame | pa.Table) -> pa.Table:
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    # One thread: Arrow's column threads wait on the GIL for object columns (the token-id lists); a round's
    # steps table converted in 23.5 ms with them against 17.2 ms without, to the same bytes (2026-11-29).
    return pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)


def write_parquet_atomic(frame: pd.DataFrame | pa.Table, path: PathLike) -> FileRecord:
    """Write a table as Parquet atomically with deterministic bytes; return its path, hash, size and
    fingerprint.

    The hash is taken from the temp file before the rename, so it describes exactly the bytes that land. The
    fingerprint is the landed file's, and only if it is still the inode that was hashed (a writer that
    replaced it in between leaves None: readers re-hash).
    """
    import pyarrow.parquet as pq

    table = _to_arrow(frame)
    final = Path(path).absolute()
    with _atomic_file(final) as (tmp, fh):
        pq.write_table(table, fh, **_PARQUET_OPTIONS)
        fh.flush()
        os.fsync(fh.fileno())
        content_hash = hash_file(tmp)
        hashed = os.fstat(fh.fileno())
    landed = final.stat()
    fingerprint = (
        {"": _fingerprint(landed)}
        if landed.st_ino == hashed.st_ino and landed.st_dev == hashed.st_dev
        else None
    )
    return FileRecord(str(final), content_hash, table.num_rows, hashed.st_size, fingerprint)


def read_parquet(path: PathLike, categories: Sequence[str] = ()) -> pd.DataFrame:
    """Read a Parquet file written by ``write_parquet_atomic`` back into pandas.

    The columns named in `categories` (those of them the file has) come back as pandas categoricals read
    straight from Parquet's dictionary pages: their values are neither made into one Python object per row
    nor hashed, and the categoricals' codes are what the advantage estimators group by
    (`creditline.credit.round_advantages.ID_COLUMNS`). A column chunk whose dictionary grew past the writer's
    limit was stored plain; Arrow hashes that one while reading (in C++), and the result is the same.
    """
    import pyarrow.parquet as pq

    return pq.read_table(path, read_dictionary=list(categories) or None).to_pandas()


def write_bytes_atomic(data: bytes, path: PathLike) -> str:
    """Write ``data`` atomically (temp name, fsync, rename); return its sha256."""
    with _atomic_file(path) as (_, fh):
        fh.write(data)
    return hashlib.sha256(data).hexdigest()


def write_json_atomic(obj: Any, path: PathLike) -> str:
    """Write ``obj`` as sorted, indented JSON atomically; return the file's sha256."""
    return write_bytes_atomic(
        (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode(), path
    )


@contextlib.contextmanager
def atomic_directory(final_path: PathLike) -> Iterator[Path]:
    """Yield a temp folder beside ``final_path``; on success it replaces ``final_path`` in one rename.

    An existing ``final_path`` is moved aside first, the new folder renamed in, then the old one deleted,
    so a reader sees the old folder or the complete new one, never a partial one. On an exception the temp
    folder is removed and ``final_path`` is untouched.
    """
    final = Path(final_path).absolute()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(final, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        _fsync_tree(tmp)
        failpoint(f"write:{final.name}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _swap_into_place(tmp, final)


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` so the rename never publishes unwritten data."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_directory(Path(dirpath))


def set_aside(path: PathLike) -> Path:
    """Rename the file or folder at ``path`` beside itself as ``<name>.set-aside-<UTC time>`` and return the
    new path.

    For a recorded output of an unfinished round whose bytes no longer match its record: it is kept for a
    person to look at (neither deleted nor a hidden temp name the orphan reaper would clear), and its name is
    free again for the stage that regenerates it.
    """
    source = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = source.with_name(f"{source.name}.set-aside-{stamp}")
    for n in itertools.count(1):
        if not target.exists():
            break
        target = source.with_name(f"{source.name}.set-aside-{stamp}-{n}")
    os.replace(source, target)
    _fsync_directory(source.parent)
    return target


def _swap_into_place(new: Path, final: Path) -> None:
    """Rename ``new`` to ``final``, replacing an existing folder; restore the old one if the rename fails."""
    old: Path | None = None
    if final.exists():
        old = _temp_sibling(final, "old")
        os.replace(final, old)
    try:
        os.replace(new, final)
    except BaseException:
        if old is not None:
            os.replace(old, final)
        shutil.rmtree(new, ignore_errors=True)
        raise
    _fsync_directory(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
