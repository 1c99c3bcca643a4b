"""Artifacts published to object storage (any fsspec URI: `s3://bucket/prefix`, `file:///mnt/share`, ...).

With a deployment's `[storage] uri`, every artifact the lineage store records is first copied there, under the
same relative path it has under the data root (`<experiment>/r001/steps.parquet`, `.../policy/...`; a folder
outside the data root, such as a user's initial policy, under `external/<hash>/`), and its record carries the
object's URI in `meta["object"]`. The order is what makes a record trustworthy:

1. each file is uploaded to a temporary key beside its destination (`.<name>.tmp-<pid>-<n>`), complete, then
   moved to its key (an object store's copy is server-side and publishes a whole object at once);
2. only after every file of the artifact is in place is the record written.

A worker killed during 1 leaves temporary keys and perhaps some of a folder's files, but no record: readers
only follow records, and a re-run uploads again (same bytes, same keys). `fetch` reads an artifact back and
checks its content hash, so object storage is never trusted by name alone. A worker that finds a recorded
input missing from its disk fetches it into place first (`LineageStore.ensure_local`).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditline.faults import failpoint
from creditline.store.files import _temp_sibling, hash_path

_COUNTER = itertools.count()
_TEMPORARY = re.compile(r".*/\.[^/]+\.tmp-\d+-\d+$")
"""A key `publish` uploads to before moving it to its name (`.<name>.tmp-<pid>-<n>`)."""


def uri_protocol(uri: str) -> str:
    """The fsspec protocol a storage URI names (`s3` for `s3://bucket/prefix`); a bare path is `file`."""
    return uri.split("://", 1)[0] if "://" in uri else "file"


def _relative(fs, root: str, key: str) -> str:
    return key[len(fs._strip_protocol(root)) :].lstrip("/")


@dataclass(frozen=True)
class ObjectStore:
    uri: str
    """The prefix artifacts are published under, e.g. `s3://bucket/creditline`."""
    data_root: str
    """Local paths under it keep their relative path as their key."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options (e.g. `{"endpoint_url": ...}` for MinIO or another S3-compatible server)."""

    def filesystem(self):
        import fsspec

        protocol = uri_protocol(self.uri)
        options = dict(self.options)
        if protocol == "s3" and "endpoint_url" in options:  # s3fs takes the endpoint as a client argument
            options.setdefault("client_kwargs", {})["endpoint_url"] = options.pop("endpoint_url")
        return fsspec.filesystem(protocol, **options)

    def key_for(self, path: str, content_hash: str) -> str:
        """The object URI an artifact at local `path` is published under."""
        local, root = Path(path).resolve(), Path(self.data_root).resolve()
        relative = (
            local.relative_to(root).as_posix() if local.is_relative_to(root) else f"external/{content_hash}"
        )
        return f"{self.uri.rstrip('/')}/{relative}"

    def publish(self, path: str, content_hash: str) -> str:
        """Upload the file or folder at `path` (its bytes hashing to `content_hash`); return its object URI.

        Every file goes to a temporary key first and is moved to its key once complete (module docstring).
        """
        fs, target = self.filesystem(), self.key_for(path, content_hash)
        local = Path(path)
        files = (
            {"": local}
            if local.is_file()
            else {p.relative_to(local).as_posix(): p for p in sorted(local.rglob("*")) if p.is_file()}
        )
        for rel, source in files.items():
            final = f"{target}/{rel}" if rel else target
            parent, name = final.rsplit("/", 1)
            temporary = f"{parent}/.{name}.tmp-{os.getpid()}-{next(_COUNTER)}"
            fs.makedirs(parent, exist_ok=True)  # a no-op on object stores; a local or mounted target needs it
            fs.put_file(str(source), temporary)
            failpoint(f"publish:{local.name}")  # killed here: a temporary key, no object, no record
            fs.mv(temporary, final)
        if local.is_dir():  # a folder published again with fewer files: its old extra keys would spoil fetch
            stale = [
                k
                for k in fs.find(target)
                if _relative(fs, target, k) not in files and not _TEMPORARY.match(k)
            ]
            if stale:
                fs.rm(stale)
        return target

    def fetch_into_place(self, uri: str, content_hash: str, path: str | os.PathLike[str]) -> None:
        """Fetch the artifact to a temporary name beside `path`, check its hash, then rename it into place: a
        reader of `path` sees nothing or the whole artifact. Two processes fetching at once both succeed."""
        final = Path(path)
        final.parent.mkdir(parents=True, exist_ok=True)
        # the writers' own temp name, so the orphan reaper clears a killed fetch's leftovers as theirs
        temporary = _temp_sibling(final, "tmp")
        try:
            self.fetch(uri, content_hash, temporary)
            try:
                os.replace(temporary, final)
            except OSError:
                if not final.exists():  # not "another process put it there first"
                    raise
        finally:
            if temporary.is_dir():
                shutil.rmtree(temporary, ignore_errors=True)
            else:
                temporary.unlink(missing_ok=True)

    def content_hash(self, uri: str) -> str | None:
        """What the bytes of the artifact at `uri` hash to now (read whole, into a temporary folder); None
        when there is no object there."""
        if not self.filesystem().exists(uri):
            return None
        with tempfile.TemporaryDirectory(prefix="creditline-check-") as tmp:
            return hash_path(self._download(uri, Path(tmp) / "object"))

    def fetch(self, uri: str, content_hash: str, destination: str | os.PathLike[str]) -> Path:
        """Download the artifact at `uri` into `destination` and check that its bytes hash to
        `content_hash`."""
        destination = self._download(uri, Path(destination))
        found = hash_path(destination)
        if found != content_hash:
            raise ValueError(
                f"object {uri}: its bytes hash to {found[:12]}, the record says {content_hash[:12]}"
            )
        return destination

    def _download(self, uri: str, destination: Path) -> Path:
        """The file or folder at `uri` copied to `destination` (a killed upload's temporary keys left out)."""
        fs = self.filesystem()
        if fs.isdir(uri):
            for key in fs.find(uri):
                if not _TEMPORARY.match(key):
                    rel = _relative(fs, uri, key)
                    (destination / rel).parent.mkdir(parents=True, exist_ok=True)
                    fs.get_file(key, str(destination / rel))
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(uri, str(destination))
        return destination
