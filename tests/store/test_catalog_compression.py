"""The catalog's checkpoints do not try FSST (`connection.CHECKPOINT_SETTINGS`): a detach after a write rewrites
every table it touched, and FSST's analysis of each string column was most of that work."""

from __future__ import annotations

from pathlib import Path

import duckdb

from creditline.store import LineageStore

PATHS = [
    (f"/data/creditline/experiment-{i % 7}/round_{i:05d}/steps-{i * 7919 % 100003:06d}.parquet",)
    for i in range(4000)
]
"""Strings DuckDB's checkpoint compresses with FSST by default (long, shared prefixes, mostly distinct)."""


def string_compressions(path: Path) -> set[str]:
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT compression FROM pragma_storage_info('paths') WHERE segment_type = 'VARCHAR'"
        )
        return {compression for (compression,) in rows.fetchall()}


def write_paths(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE paths (path VARCHAR)")
    con.executemany("INSERT INTO paths VALUES (?)", PATHS)


def test_a_table_the_store_writes_is_checkpointed_without_fsst(tmp_path: Path) -> None:
    plain = tmp_path / "plain.duckdb"
    with duckdb.connect(str(plain)) as con:  # DuckDB's defaults: the same rows take FSST
        write_paths(con)
    assert "FSST" in string_compressions(plain)

    store = LineageStore(tmp_path / "lineage.duckdb")
    store.transaction(write_paths)  # attached, written, detached: the detach checkpoints
    found = string_compressions(tmp_path / "lineage.duckdb")
    assert found and "FSST" not in found
    assert store.experiments() == []  # the catalog itself is intact
