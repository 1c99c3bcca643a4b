"""Paths relative to the data root: a moved data root verifies clean, and an older catalog is migrated."""

from __future__ import annotations

import shutil
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
from creditline.store.root_paths import migrated_path, resolved_path, stored_path

Sql = Callable[..., list]


@pytest.fixture(params=["duckdb", "postgres"])
def open_root(request) -> Callable[[Path], LineageStore]:
    """`open_root(data_root)`: the store of a data root, its catalog a file inside it (moving the root moves
    the catalog) or a Postgres database (which stays where it is)."""
    if request.param == "postgres":
        uri = request.getfixturevalue("postgres_catalog")
        return lambda root: LineageStore(uri, data_root=root)
    return lambda root: LineageStore(root / "lineage.duckdb")


def _record_round(store: LineageStore, root: Path, outside: Path) -> None:
    """A user's initial policy outside the data root, and a round's table and checkpoint under it."""
    with atomic_directory(outside) as folder:
        (folder / "weights.bin").write_bytes(b"initial")
    initial = store.record_initial_policy("exp", str(outside), hash_directory(outside))
    table = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), root / "exp" / "r001" / "steps.parquet")
    steps = ArtifactRecord("exp", 1, "steps", table.path, table.content_hash, rows=table.rows)
    store.record_artifact(steps, [(initial.content_hash, "generated_from")])
    policy = root / "exp" / "r001" / "policy"
    with atomic_directory(policy) as folder:
        (folder / "weights.bin").write_bytes(b"trained")
    checkpoint = ArtifactRecord("exp", 1, "checkpoint", str(policy), hash_directory(policy))
    store.record_artifact(checkpoint, [(initial.content_hash, "initialized_from")])


def _paths(sql: Sql, store: LineageStore) -> dict[str, str]:
    return dict(sql(store, "SELECT kind || variant, path FROM artifacts ORDER BY kind, variant"))


def test_paths_under_the_root_are_recorded_relative_and_read_back_absolute(
    open_root, sql: Sql, tmp_path: Path
) -> None:
    root, outside = tmp_path / "root", tmp_path / "models" / "initial"
    store = open_root(root)
    _record_round(store, root, outside)
    assert _paths(sql, store) == {
        "checkpoint": "exp/r001/policy",
        "checkpointinitial": str(outside),
        "steps": "exp/r001/steps.parquet",
    }
    steps = store.artifact("exp", 1, "steps")
    assert steps is not None and steps.path == str(root / "exp" / "r001" / "steps.parquet")
    assert store.verify("exp") == []


def test_a_moved_data_root_verifies_clean(open_root, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "models" / "initial"
    _record_round(open_root(root), root, outside)
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(root, moved)
    store = open_root(moved)
    assert store.verify("exp") == []
    assert {r.path for r in store.artifacts("exp")} == {
        str(outside),
        str(moved / "exp" / "r001" / "policy"),
        str(moved / "exp" / "r001" / "steps.parquet"),
    }


def test_an_older_catalog_with_absolute_paths_is_migrated_once_after_a_move(
    open_root, sql: Sql, tmp_path: Path
) -> None:
    root, outside = tmp_path / "root", tmp_path / "models" / "initial"
    old = open_root(root)
    _record_round(old, root, outside)
    # the catalog as the versions before relative paths wrote it: absolute paths, no migration done
    sql(old, "UPDATE artifacts SET path = ? || '/' || path WHERE path NOT LIKE '/%'", [str(root)])
    sql(old, "DELETE FROM schema_migrations")
    assert set(_paths(sql, old).values()) == {
        str(outside),
        str(root / "exp/r001/policy"),
        str(root / "exp/r001/steps.parquet"),
    }
    moved = tmp_path / "moved"
    shutil.move(root, moved)
    store = open_root(moved)  # a new process: its first transaction migrates the catalog
    assert store.verify("exp") == []
    assert _paths(sql, store) == {
        "checkpoint": "exp/r001/policy",
        "checkpointinitial": str(outside),
        "steps": "exp/r001/steps.parquet",
    }
    assert sql(store, "SELECT name FROM schema_migrations") == [("relative_paths",)]
    # once done, it never runs again: a later absolute path laid out like a round's stays as recorded
    odd = tmp_path / "other" / "exp" / "r002" / "steps.parquet"
    sql(store, "UPDATE artifacts SET path = ? WHERE kind = 'steps'", [str(odd)])
    steps = open_root(moved).artifact("exp", 1, "steps")
    assert steps is not None and steps.path == str(odd)


def test_path_rules() -> None:
    assert stored_path("/data/exp/r001/a.parquet", "/data") == "exp/r001/a.parquet"
    assert stored_path("/data2/exp/a.parquet", "/data") == "/data2/exp/a.parquet"  # a sibling, not under
    assert stored_path("/data/../x/a.parquet", "/data") == "/data/../x/a.parquet"  # not normalised: as is
    assert stored_path("s3://bucket/exp/a", "/data") == "s3://bucket/exp/a"
    assert stored_path("/data/exp/a", None) == "/data/exp/a"
    assert resolved_path("exp/r001/a.parquet", "/new") == "/new/exp/r001/a.parquet"
    assert resolved_path("/abs/a", "/new") == "/abs/a" and resolved_path("exp/a", None) == "exp/a"
    assert migrated_path("/old/root/exp/r003/policy", "exp", "/new") == "exp/r003/policy"
    assert migrated_path("/new/anything/a.bin", "exp", "/new") == "anything/a.bin"
    assert migrated_path("/home/me/models/qwen", "exp", "/new") == "/home/me/models/qwen"
    assert migrated_path("/old/exp-2/r001/a", "exp", "/new") == "/old/exp-2/r001/a"
