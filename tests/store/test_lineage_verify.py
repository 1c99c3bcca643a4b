"""verify checks every lineage edge both ways against the parents each artifact declared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from creditline.store import ArtifactRecord, LineageStore, Problem, record_rubric_version, rubric_versions

Recorded = dict[tuple[int, str], ArtifactRecord]
Sql = Callable[..., list]


def _kinds(problems: list[Problem]) -> list[str]:
    return sorted(p.kind for p in problems)


def _art(kind: str, content_hash: str, variant: str = "") -> ArtifactRecord:
    return ArtifactRecord("exp", 1, kind, "/data/x", content_hash, variant=variant)


def test_declared_parents_are_stored_sorted_and_read_back(store: LineageStore) -> None:
    stored = store.record_artifact(_art("scores", "sc"), [("st", "scored_from"), ("ep", "scored_from")] * 2)
    assert stored.parents == (("ep", "scored_from"), ("st", "scored_from"))
    read = store.artifact("exp", 1, "scores")
    assert read is not None and read.parents == stored.parents
    assert store.artifact_by_hash("sc")[0].parents == stored.parents
    store.record_artifact(read)  # re-recording a record read back keeps its parents and edges
    assert store.parents("sc") == [("ep", "scored_from"), ("st", "scored_from")]
    store.record_artifact(read, [])  # explicit parents win
    assert store.parents("sc") == [] and store.artifact("exp", 1, "scores").parents == ()  # type: ignore[union-attr]


def test_a_consistent_catalog_verifies_clean(store: LineageStore, recorded: Recorded) -> None:
    assert store.verify("exp") == []


def test_a_deleted_edge_is_edge_missing_naming_the_artifact(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    scores, episodes = recorded[1, "scores"], recorded[1, "episodes"]
    sql(store, "DELETE FROM lineage WHERE child_hash = ? AND parent_hash = ?",
        [scores.content_hash, episodes.content_hash])  # fmt: skip
    (problem,) = store.verify("exp")
    assert (problem.kind, problem.path, problem.expected_hash) == (
        "edge_missing",
        scores.path,
        episodes.content_hash,
    )
    assert "exp/1/scores" in problem.detail and "scored_from" in problem.detail
    assert scores.content_hash[:12] in problem.detail and episodes.content_hash[:12] in problem.detail


def test_an_inserted_edge_is_edge_extra(sql: Sql, store: LineageStore, recorded: Recorded) -> None:
    checkpoint, episodes = recorded[2, "checkpoint"], recorded[2, "episodes"]
    sql(store, "INSERT INTO lineage VALUES (?, ?, 'trained_on')",
        [checkpoint.content_hash, episodes.content_hash])  # fmt: skip
    (problem,) = store.verify("exp")
    assert (problem.kind, problem.path, problem.expected_hash) == (
        "edge_extra",
        checkpoint.path,
        episodes.content_hash,
    )
    assert "exp/2/checkpoint" in problem.detail and checkpoint.content_hash[:12] in problem.detail


def test_an_edge_with_an_edited_relation_is_both_missing_and_extra(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    steps = recorded[1, "steps"]
    sql(store, "UPDATE lineage SET relation = 'copied_from' WHERE child_hash = ?", [steps.content_hash])
    problems = store.verify("exp")
    assert _kinds(problems) == ["edge_extra", "edge_missing"]
    assert {p.path for p in problems} == {steps.path}


def test_an_edited_hash_leaves_orphan_and_missing_edges(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    scores, old = recorded[1, "scores"], recorded[1, "scores"].content_hash
    sql(store, "UPDATE artifacts SET content_hash = ? WHERE content_hash = ?", ["f" * 64, old])
    problems = store.verify("exp")
    by_kind: dict[str, list[Problem]] = {}
    for p in problems:
        by_kind.setdefault(p.kind, []).append(p)
    # its file no longer matches; its declared parents have no edges under the new hash; the old hash's
    # edges have lost their child; the advantages' edge points at a hash that no row carries
    assert {k: len(v) for k, v in by_kind.items()} == {
        "changed": 1,
        "edge_missing": 2,
        "orphan_edge": 2,
        "dangling": 1,
    }
    assert all(p.path == scores.path for p in by_kind["changed"] + by_kind["edge_missing"])
    assert {p.expected_hash for p in by_kind["orphan_edge"]} == {old}
    assert all(old[:12] in p.detail and "exp/1/" in p.detail for p in by_kind["orphan_edge"])
    assert by_kind["dangling"][0].path == recorded[1, "advantages"].path


def test_a_deleted_row_and_a_detached_edge_are_orphan_edges(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    training = recorded[2, "training"]
    sql(store, "DELETE FROM artifacts WHERE content_hash = ?", [training.content_hash])
    sql(store, "INSERT INTO lineage VALUES ('nobody', 'nothing', 'made_from')")
    problems = store.verify("exp")
    assert _kinds(problems) == ["orphan_edge", "orphan_edge"]
    deleted = next(p for p in problems if p.expected_hash == training.content_hash)
    assert deleted.path == recorded[2, "checkpoint"].path and "exp/2/checkpoint" in deleted.detail
    detached = next(p for p in problems if p.expected_hash == "nobody")
    assert detached.path == "" and "unrecorded too" in detached.detail


def test_rows_sharing_a_hash_keep_the_union_of_their_parents(store: LineageStore) -> None:
    store.record_artifact(_art("scores", "same", "rubric=v1"), [("ep1", "scored_from")])
    store.record_artifact(_art("scores", "same", "rubric=v2"), [("ep2", "scored_from")])
    assert store.parents("same") == [("ep1", "scored_from"), ("ep2", "scored_from")]
    store.record_initial_policy("exp", "/m", "ep1")
    store.record_initial_policy("other", "/m", "ep2")
    assert [p for p in store.verify("exp") if p.kind not in ("missing", "consumed")] == []  # made-up paths
    store.record_artifact(_art("scores", "different", "rubric=v2"), [("ep2", "scored_from")])
    assert store.parents("same") == [("ep1", "scored_from")]
    with pytest.raises(ValueError, match="two relations"):
        store.record_artifact(_art("scores", "same", "rubric=v3"), [("ep1", "copied_from")])
    assert store.artifact("exp", 1, "scores", "rubric=v3") is None
    assert store.parents("same") == [("ep1", "scored_from")]


_CATALOG_BEFORE_PARENTS_JSON = """
    CREATE TABLE artifacts (
        experiment VARCHAR NOT NULL, round INTEGER NOT NULL, kind VARCHAR NOT NULL,
        variant VARCHAR NOT NULL DEFAULT '', path VARCHAR NOT NULL, content_hash VARCHAR NOT NULL,
        rows BIGINT, meta_json VARCHAR NOT NULL DEFAULT '{}', created_at TIMESTAMP NOT NULL,
        dagster_run_id VARCHAR, PRIMARY KEY (experiment, round, kind, variant));
    CREATE TABLE lineage (
        child_hash VARCHAR NOT NULL, parent_hash VARCHAR NOT NULL, relation VARCHAR NOT NULL,
        PRIMARY KEY (child_hash, parent_hash));
    INSERT INTO artifacts VALUES
        ('exp', 0, 'checkpoint', 'initial', '/m', 'p0', NULL, '{}', now(), NULL),
        ('exp', 1, 'episodes', '', '/e', 'ep', 3, '{}', now(), 'run'),
        ('exp', 1, 'steps', '', '/s', 'st', 9, '{}', now(), 'run');
    INSERT INTO lineage VALUES ('ep', 'p0', 'generated_from'), ('st', 'p0', 'generated_from');
"""


def test_an_older_catalog_gets_declared_parents_from_its_edges_once(sql: Sql, tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    store = LineageStore(path)
    sql(store, _CATALOG_BEFORE_PARENTS_JSON)
    episodes = store.artifact("exp", 1, "episodes")
    assert episodes is not None and episodes.parents == (("p0", "generated_from"),)
    assert (episodes.rows, episodes.dagster_run_id) == (3, "run")
    assert store.initial_policy("exp").parents == ()  # type: ignore[union-attr]
    assert [k for k in _kinds(store.verify("exp")) if k != "consumed"] == [
        "missing"
    ] * 3  # made-up paths; edges agree
    sql(store, "DELETE FROM lineage WHERE child_hash = 'st'")
    again = LineageStore(path)  # a new process: the migration must not re-derive parents from the edges
    assert [k for k in _kinds(again.verify("exp")) if k != "consumed"] == ["edge_missing"] + ["missing"] * 3


def test_an_older_catalog_s_rubric_versions_get_an_empty_source(sql: Sql, tmp_path: Path) -> None:
    store = LineageStore(tmp_path / "old.duckdb")
    sql(store, """
        CREATE TABLE rubric_versions (version VARCHAR PRIMARY KEY, rubric VARCHAR NOT NULL,
                                      definition_json VARCHAR NOT NULL, first_seen_at TIMESTAMP NOT NULL);
        INSERT INTO rubric_versions VALUES ('env-0ld0ld00', 'env', '{}', now());
    """)  # fmt: skip
    assert [(r.version, r.source) for r in rubric_versions(store)] == [("env-0ld0ld00", "")]
    assert record_rubric_version(store, "mine-12345678", "mine", {}, source="mypkg.rubrics:mine")
    assert [r.source for r in rubric_versions(store)] == ["", "mypkg.rubrics:mine"]
