"""The catalog's row groups are small (`connection.ROW_GROUP_ROWS`): a detach after a write rewrites the last row
group of every table it touched, so with DuckDB's default (122,880 rows) a write's checkpoint grew with the
table, round after round."""

from __future__ import annotations

from pathlib import Path

import duckdb

from creditline.store import LineageStore, RunRecord
from creditline.store.connection import ROW_GROUP_ROWS

ROWS = 5000


def row_groups(path: Path, table: str) -> list[int]:
    """The rows of each row group of `table`, in order."""
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            f"SELECT row_group_id, max(start + count) - min(start) FROM pragma_storage_info('{table}') "
            "WHERE column_id = 0 GROUP BY row_group_id ORDER BY row_group_id"
        )
        return [count for _, count in rows.fetchall()]


def add_runs(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "INSERT INTO runs (dagster_run_id, experiment, round, asset, created_at) "
        f"SELECT 'run-' || range, 'exp', range, 'steps', now() FROM range({ROWS})"
    )


def run(round_: int) -> RunRecord:
    return RunRecord(f"new-{round_}", "exp", round_, "steps", None, "v1", {})


def test_the_store_writes_rows_in_small_row_groups(tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.transaction(add_runs)  # attached, written, detached: the detach checkpoints
    groups = row_groups(tmp_path / "lineage.duckdb", "runs")
    assert sum(groups) == ROWS
    assert max(groups) <= ROW_GROUP_ROWS and len(groups) == -(-ROWS // ROW_GROUP_ROWS)

    plain = tmp_path / "plain.duckdb"  # the control: DuckDB's default keeps the same rows in one row group
    with duckdb.connect(str(plain)) as con:
        con.execute(f"ATTACH '{tmp_path / 'lineage.duckdb'}' AS source (READ_ONLY)")
        con.execute("CREATE TABLE runs AS SELECT * FROM source.runs WHERE false")
        add_runs(con)
    assert row_groups(plain, "runs") == [ROWS]


def test_new_rows_leave_a_default_catalogs_large_row_group_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "lineage.duckdb"
    store = LineageStore(path)
    store.experiments()  # creates the schema
    with duckdb.connect(str(path)) as con:  # written by DuckDB's default, as catalogs were before
        add_runs(con)
    assert row_groups(path, "runs") == [ROWS]

    store.record_run(run(ROWS))
    store.record_run(run(ROWS + 1))
    # the large row group is not rewritten; the new rows go into a small one
    assert row_groups(path, "runs") == [ROWS, 2]
    assert [r.round for r in store.runs("exp") if r.dagster_run_id.startswith("new-")] == [ROWS, ROWS + 1]
