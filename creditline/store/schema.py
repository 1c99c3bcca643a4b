"""The lineage catalog's tables, created idempotently on first use.

Keys encode the "re-running a step never duplicates anything" rule: an artifact is unique per
(experiment, round, kind, variant), an edge per (child, parent), a run per (Dagster run, asset), an
evaluation per (experiment, round); writers upsert on those keys. Hashes, not paths, are the identity in
``lineage``, so an edge survives a file being moved and a re-scored table's parents are exact.
Timestamps are naive UTC.
"""

from __future__ import annotations

import duckdb

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
        PRIMARY KEY (experiment, round, kind, variant)
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
)


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create any missing table; safe to call on every start and from several processes."""
    for statement in SCHEMA_SQL:
        con.execute(statement)
