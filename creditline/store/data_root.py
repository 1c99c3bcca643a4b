"""A data root's lineage store: where the data root is, and the one store object per catalog and process.

The catalog is `<data_root>/lineage.duckdb` unless the deployment puts it on Postgres (`[lineage] catalog`);
with object storage configured (`[storage] uri`), every recorded artifact is published under that URI too.
The Dagster resource (`resources.lineage.LineageResource`, which also knows where a round's files go) and
the CLI's read-only commands (`creditline report`, `lineage`, `verify`) open it here, the same way, and
share the store object: a command that only reads the catalog does not import Dagster to find it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from creditline.store.lineage import LineageStore
from creditline.store.objects import ObjectStore

DATA_ROOT_ENV = "CREDITLINE_DATA_ROOT"
CATALOG = "lineage.duckdb"


def default_data_root() -> str:
    """`$CREDITLINE_DATA_ROOT`, else `./creditline-data`, as an absolute path."""
    return str(Path(os.environ.get(DATA_ROOT_ENV, "creditline-data")).resolve())


def catalog_target(data_root: str, catalog: str = "") -> str:
    """The catalog a data root's commands open: `catalog` (a `postgresql://` URI) or the data root's file."""
    return catalog or str(Path(data_root) / CATALOG)


@functools.lru_cache(maxsize=16)
def store_at(
    path: str, storage: tuple[str, str, str] | None = None, data_root: str | None = None
) -> LineageStore:
    """One store object per catalog and process: its schema is created once, not per call. `storage` is
    (object storage URI, data root, the filesystem's options as JSON), or None; `data_root` is where the
    recorded paths are relative to (None: the DuckDB catalog's folder; on Postgres, none).

    Nothing is created until the first query (so a read-only command on a mistyped root creates nothing).
    """
    objects = None if storage is None else ObjectStore(storage[0], storage[1], json.loads(storage[2]))
    return LineageStore(path, objects=objects, data_root=data_root)


def open_store(
    data_root: str, catalog: str = "", storage_uri: str = "", storage_options_json: str = "{}"
) -> LineageStore:
    """The store of `data_root` under a deployment's `catalog` and `storage_uri` (empty: the defaults)."""
    storage = (storage_uri, str(Path(data_root)), storage_options_json) if storage_uri else None
    return store_at(catalog_target(data_root, catalog), storage, str(Path(data_root)))
