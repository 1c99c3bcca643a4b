"""The lineage catalog's tables, created idempotently on first use.

Keys encode the "re-running a step never duplicates anything" rule: an artifact is unique per
(experiment, round, kind, variant), an edge per (child, parent), a run per (Dagster run, asset), an
evaluation per (experiment, round); writers upsert on those keys. Hashes, not paths, are the identity in
``lineage``, so an edge survives a file being moved and a re-scored table's parents are exact.
Timestamps are naive UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from creditline.store.root_paths import relative_path_updates

SCHEMA_SQL = (
    """
    CREATE TABLE IF NOT EXISTS experiments (
        experiment  VARCHAR PRIMARY KEY,
        config_json VARCHAR NOT NULL,
        config_hash VARCHAR NOT NULL,
        created_at  TIMESTAMP NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS artifacts (
        experiment     VARCHAR NOT NULL,
        round          INTEGER NOT NULL,
        kind           VARCHAR NOT NULL,
        variant        VARCHAR NOT NULL DEFAULT '',
        path           VARCHAR NOT NULL,
        content_hash   VARCHAR NOT NULL,
        rows           BIGINT,
        meta_json      VARCHAR NOT NULL DEFAULT '{}',
        created_at     TIMESTAMP NOT NULL,
        dagster_run_id VARCHAR,
        parents_json   VARCHAR NOT NULL DEFAULT '[]',
        PRIMARY KEY (experiment, round, kind, variant)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS schema_migrations (
        name       VARCHAR PRIMARY KEY,
        applied_at TIMESTAMP NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS lineage (
        child_hash  VARCHAR NOT NULL,
        parent_hash VARCHAR NOT NULL,
        relation    VARCHAR NOT NULL,
        PRIMARY KEY (child_hash, parent_hash)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS runs (
        dagster_run_id VARCHAR NOT NULL,
        experiment     VARCHAR NOT NULL,
        round          INTEGER NOT NULL,
        asset          VARCHAR NOT NULL,
        mlflow_run_id  VARCHAR,
        code_version   VARCHAR,
        config_json    VARCHAR NOT NULL DEFAULT '{}',
        created_at     TIMESTAMP NOT NULL,
        PRIMARY KEY (dagster_run_id, asset)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS evaluations (
        experiment          VARCHAR NOT NULL,
        round               INTEGER NOT NULL,
        policy_hash         VARCHAR NOT NULL,
        success_rate        DOUBLE NOT NULL,
        mean_return         DOUBLE NOT NULL,
        mean_steps          DOUBLE NOT NULL,
        invalid_action_rate DOUBLE NOT NULL,
        episodes            INTEGER NOT NULL,
        created_at          TIMESTAMP NOT NULL,
        PRIMARY KEY (experiment, round)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS leases (
        experiment   VARCHAR PRIMARY KEY,
        holder       VARCHAR NOT NULL,
        acquired_at  TIMESTAMP NOT NULL,
        heartbeat_at TIMESTAMP NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS round_commits (
        experiment     VARCHAR NOT NULL,
        round          INTEGER NOT NULL,
        dagster_run_id VARCHAR NOT NULL,
        mlflow_run_id  VARCHAR NOT NULL,
        artifacts_json VARCHAR NOT NULL,
        committed_at   TIMESTAMP NOT NULL,
        PRIMARY KEY (experiment, round)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS tracking_runs (
        experiment    VARCHAR NOT NULL,
        round         INTEGER NOT NULL,
        mlflow_run_id VARCHAR NOT NULL,
        created_at    TIMESTAMP NOT NULL,
        PRIMARY KEY (experiment, round)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS branches (
        steps_hash        VARCHAR NOT NULL,
        episode_id        VARCHAR NOT NULL,
        branch_of_episode VARCHAR NOT NULL,
        branch_of_step    INTEGER NOT NULL,
        PRIMARY KEY (steps_hash, episode_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS rubric_versions (
        version         VARCHAR PRIMARY KEY,
        rubric          VARCHAR NOT NULL,
        definition_json VARCHAR NOT NULL,
        first_seen_at   TIMESTAMP NOT NULL,
        source          VARCHAR DEFAULT ''
    )
    """,
)


def create_schema(con: duckdb.DuckDBPyConnection, data_root: str | None = None) -> None:
    """Create any missing table and migrate older catalogs; safe on every start and from several processes.

    `data_root`: where the catalog's relative paths lie (`root_paths`); None leaves the paths migration for
    a store that knows it.
    """
    for statement in SCHEMA_SQL:
        con.execute(statement)
    _add_declared_parents(con)
    _add_rubric_source(con)
    if data_root is not None:
        _relative_paths(con, data_root)


def _has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_catalog = current_database() "
        "AND table_schema = current_schema() AND table_name = ? AND column_name = ?",
        [table, column],
    ).fetchone()
    return row is not None and row[0] > 0


def _add_declared_parents(con: duckdb.DuckDBPyConnection) -> None:
    """Migration: ``artifacts.parents_json``, the sorted [[parent_hash, relation], ...] a row was recorded
    with.

    ``verify`` compares it with the ``lineage`` edges to notice a deleted or added edge. A catalog made
    before the column existed gets it once, backfilled from its edges (then the only record of the
    parents); the presence check keeps the backfill from ever running again, and stands in for
    ``ADD COLUMN IF NOT EXISTS``. The added column has no NOT NULL (DuckDB cannot add a column with a
    constraint); its default fills the old rows and every writer sets it.
    """
    if _has_column(con, "artifacts", "parents_json"):
        return
    con.execute("ALTER TABLE artifacts ADD COLUMN parents_json VARCHAR DEFAULT '[]'")
    con.execute(
        """
        UPDATE artifacts SET parents_json = declared.parents_json
        FROM (
            SELECT child_hash,
                   to_json(list([parent_hash, relation] ORDER BY parent_hash))::VARCHAR AS parents_json
            FROM lineage GROUP BY child_hash
        ) AS declared
        WHERE artifacts.content_hash = declared.child_hash
        """
    )


def _add_rubric_source(con: duckdb.DuckDBPyConnection) -> None:
    """Migration: ``rubric_versions.source``, the name or import path a version's rubric was first loaded
    by (`creditline.store.rubric_versions`). Older rows get '' (the built-ins and registered plugins are
    found without it)."""
    if not _has_column(con, "rubric_versions", "source"):
        con.execute("ALTER TABLE rubric_versions ADD COLUMN source VARCHAR DEFAULT ''")


RELATIVE_PATHS = "relative_paths"


def _relative_paths(con: duckdb.DuckDBPyConnection, data_root: str) -> None:
    """Migration, once per catalog: the absolute paths of older catalogs made relative to the data root
    (`root_paths.relative_path_updates`), so that a data root moved before this version verifies clean.

    Its row in ``schema_migrations`` keeps it from running again (a path recorded later outside the data root
    stays as recorded). Two processes migrating at once write the same rows; on Postgres one of them fails on
    the marker's key, and its retry finds the migration done.
    """
    done = con.execute("SELECT count(*) FROM schema_migrations WHERE name = ?", [RELATIVE_PATHS]).fetchone()
    if done is not None and done[0] > 0:
        return
    rows = con.execute(
        "SELECT experiment, round, kind, variant, path FROM artifacts WHERE path LIKE '/%'"
    ).fetchall()
    updates = relative_path_updates(rows, data_root)
    if updates:
        con.executemany(
            "UPDATE artifacts SET path = ? WHERE experiment = ? AND round = ? AND kind = ? AND variant = ?",
            updates,
        )
    now = datetime.now(UTC).replace(tzinfo=None)
    con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [RELATIVE_PATHS, now])
