from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from creditline.store import (
    ArtifactRecord,
    LineageStore,
    atomic_directory,
    hash_directory,
    write_parquet_atomic,
)
from creditline.store.connection import open_catalog


@pytest.fixture(params=["duckdb", "postgres"])
def store(request, tmp_path: Path) -> LineageStore:
    """The catalog as a DuckDB file (local profile) and as a Postgres database (server profile): every test
    that takes this fixture runs against both."""
    if request.param == "postgres":
        return LineageStore(request.getfixturevalue("postgres_catalog"))
    return LineageStore(tmp_path / "catalog" / "lineage.duckdb")


def _sql(store: LineageStore, statement: str, params: list | None = None) -> list:
    with open_catalog(store.path) as con:
        cursor = con.execute(statement, params or [])
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def sql() -> Callable[..., list]:
    """``sql(store, statement, params)``: raw SQL on the catalog behind the store's back (edits by hand)."""
    return _sql


def _table(store: LineageStore, root: Path, round_: int, kind: str, parents: list[tuple[str, str]]):
    written = write_parquet_atomic(
        pd.DataFrame({"kind": [kind], "round": [round_]}), root / "exp" / f"r{round_:03d}" / f"{kind}.parquet"
    )
    record = ArtifactRecord("exp", round_, kind, written.path, written.content_hash, rows=written.rows)
    return store.record_artifact(record, parents)


def _folder(store: LineageStore, path: Path, round_: int, variant: str, parents: list[tuple[str, str]]):
    with atomic_directory(path) as folder:
        (folder / "weights.bin").write_bytes(f"{round_}{variant}".encode())
    record = ArtifactRecord("exp", round_, "checkpoint", str(path), hash_directory(path), variant=variant)
    return store.record_artifact(record, parents)


@pytest.fixture
def recorded(store: LineageStore, tmp_path: Path) -> dict[tuple[int, str], ArtifactRecord]:
    """Real files for the initial policy and two rounds, recorded as the assets record them.

    Keyed by (round, kind); the initial policy is (0, "checkpoint"). Each round:
    checkpoint <- advantages <- scores <- episodes, steps <- the previous checkpoint.
    """
    root = tmp_path / "data"
    records = {(0, "checkpoint"): _folder(store, root / "exp/r000/policy", 0, "initial", [])}
    for r in (1, 2):
        parent = records[r - 1, "checkpoint"].content_hash
        episodes = _table(store, root, r, "episodes", [(parent, "generated_from")])
        steps = _table(store, root, r, "steps", [(parent, "generated_from")])
        scores = _table(store, root, r, "scores", [(episodes.content_hash, "scored_from"),
                                                   (steps.content_hash, "scored_from")])  # fmt: skip
        advantages = _table(store, root, r, "advantages", [(steps.content_hash, "computed_from"),
                                                           (scores.content_hash, "computed_from")])  # fmt: skip
        checkpoint = _folder(store, root / f"exp/r{r:03d}/policy", r, "", [
            (parent, "initialized_from"), (advantages.content_hash, "trained_on"),
            (steps.content_hash, "trained_on")])  # fmt: skip
        training = _table(store, root, r, "training", [(checkpoint.content_hash, "summarises")])
        for record in (episodes, steps, scores, advantages, checkpoint, training):
            records[r, record.kind] = record
    return records
