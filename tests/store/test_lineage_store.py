"""The lineage catalog: upserts never duplicate, edges follow their child, walks and audits are exact."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from creditline.store import (
    ArtifactRecord,
    EvaluationRecord,
    ExperimentConfigMismatch,
    LineageStore,
    RunRecord,
    atomic_directory,
    config_hash,
    hash_directory,
    write_parquet_atomic,
)
from creditline.store.connection import RetryPolicy, open_catalog
from creditline.store.errors import CatalogDamagedError, CatalogTooNewError


def _count(store: LineageStore, table: str) -> int:
    with open_catalog(store.path) as con:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def _art(
    kind: str, content_hash: str, round_: int = 0, variant: str = "", path: str = "/data/x"
) -> ArtifactRecord:
    return ArtifactRecord("exp", round_, kind, path, content_hash, variant=variant)


def test_register_experiment_is_idempotent_and_rejects_a_new_config(store: LineageStore) -> None:
    h = store.register_experiment("exp", {"lr": 1e-5, "group_size": 8})
    assert h == config_hash({"group_size": 8, "lr": 1e-5})
    assert store.register_experiment("exp", {"group_size": 8, "lr": 1e-5}) == h
    with pytest.raises(ExperimentConfigMismatch) as info:
        store.register_experiment("exp", {"lr": 2e-5, "group_size": 8})
    new = config_hash({"lr": 2e-5, "group_size": 8})
    assert h in str(info.value) and new in str(info.value)
    assert store.experiment_config("exp") == {"lr": 1e-5, "group_size": 8}
    assert store.experiment_config("other") is None
    store.register_experiment("another", {})
    assert store.experiments() == ["another", "exp"]
    assert _count(store, "experiments") == 2


def test_schema_creation_is_idempotent_across_instances(store: LineageStore) -> None:
    store.record_artifact(_art("episodes", "h1"))
    again = LineageStore(store.path)
    again.record_artifact(_art("steps", "h2"))
    assert [a.kind for a in again.artifacts("exp")] == ["episodes", "steps"]


def test_recording_the_same_key_twice_replaces_the_row(store: LineageStore) -> None:
    first = ArtifactRecord(
        "exp",
        1,
        "scores",
        "/d/1.parquet",
        "h-old",
        variant="rubric=v1",
        rows=5,
        meta={"mean": 0.1},
        dagster_run_id="run-a",
    )
    store.record_artifact(first)
    store.record_artifact(
        ArtifactRecord(
            "exp",
            1,
            "scores",
            "/d/2.parquet",
            "h-new",
            variant="rubric=v1",
            rows=7,
            meta={"mean": 0.2},
            dagster_run_id="run-b",
        )
    )
    store.record_artifact(_art("scores", "h-v2", round_=1, variant="rubric=v2"))
    assert _count(store, "artifacts") == 2
    got = store.artifact("exp", 1, "scores", "rubric=v1")
    assert got is not None
    assert (got.path, got.content_hash, got.rows, dict(got.meta), got.dagster_run_id) == (
        "/d/2.parquet",
        "h-new",
        7,
        {"mean": 0.2},
        "run-b",
    )
    assert got.created_at is not None
    assert store.artifact("exp", 1, "scores") is None
    assert [a.variant for a in store.artifacts("exp", round=1, kind="scores")] == ["rubric=v1", "rubric=v2"]
    assert store.artifact_by_hash("h-old") == []


def test_rerecording_replaces_lineage_edges(store: LineageStore) -> None:
    store.record_artifact(
        _art("advantages", "adv"), [("scores", "computed_from"), ("steps", "computed_from")]
    )
    store.record_artifact(_art("advantages", "adv"), [("scores2", "computed_from")])
    assert store.parents("adv") == [("scores2", "computed_from")]
    store.record_artifact(_art("advantages", "adv-new"), [("scores3", "computed_from")])
    assert store.parents("adv") == []
    assert store.parents("adv-new") == [("scores3", "computed_from")]
    assert _count(store, "lineage") == 1


def test_replacing_a_shared_hash_keeps_the_other_artifacts_edges(store: LineageStore) -> None:
    store.record_artifact(_art("scores", "same", variant="rubric=v1"), [("ep", "scored_from")])
    store.record_artifact(_art("scores", "same", variant="rubric=v2"), [("ep", "scored_from")])
    store.record_artifact(_art("scores", "different", variant="rubric=v2"), [("ep", "scored_from")])
    assert store.parents("same") == [("ep", "scored_from")]


def test_invalid_parents_are_rejected(store: LineageStore) -> None:
    with pytest.raises(ValueError, match="own parent"):
        store.record_artifact(_art("steps", "h"), [("h", "generated_from")])
    with pytest.raises(ValueError, match="two relations"):
        store.record_artifact(_art("steps", "h"), [("p", "a"), ("p", "b")])
    store.record_artifact(_art("steps", "h"), [("p", "a"), ("p", "a")])
    assert store.parents("h") == [("p", "a")]


def _record_round(store: LineageStore) -> None:
    """policy0 <- episodes/steps <- scores <- advantages (from scores and steps) <- checkpoint."""
    store.record_initial_policy("exp", "/models/tiny", "policy0")
    store.record_artifact(_art("episodes", "ep"), [("policy0", "generated_from")])
    store.record_artifact(_art("steps", "st"), [("policy0", "generated_from")])
    store.record_artifact(
        _art("scores", "sc", variant="rubric=v1"), [("ep", "scored_from"), ("st", "scored_from")]
    )
    store.record_artifact(
        _art("advantages", "adv", variant="rubric=v1;estimator=gigpo"),
        [("sc", "computed_from"), ("st", "computed_from")],
    )
    store.record_artifact(_art("checkpoint", "ck"), [("adv", "trained_from")])


def test_lineage_chain_walks_back_to_the_root_without_duplicates(store: LineageStore) -> None:
    _record_round(store)
    chain = store.lineage_chain("ck")
    assert [(n.content_hash, n.depth, n.relation, n.child_hash) for n in chain] == [
        ("ck", 0, "", None),
        ("adv", 1, "trained_from", "ck"),
        ("sc", 2, "computed_from", "adv"),
        ("st", 2, "computed_from", "adv"),
        ("ep", 3, "scored_from", "sc"),
        ("policy0", 3, "generated_from", "st"),
    ]
    assert [a.kind for a in chain[1].artifacts] == ["advantages"]
    assert chain[-1].artifacts[0].variant == "initial"
    assert store.initial_policy("exp") == chain[-1].artifacts[0]
    (only,) = store.lineage_chain("unknown")
    assert (only.content_hash, only.depth, only.artifacts) == ("unknown", 0, ())


def test_lineage_chain_terminates_on_a_cycle(store: LineageStore) -> None:
    store.record_artifact(_art("a", "A"), [("B", "x")])
    store.record_artifact(_art("b", "B"), [("C", "x")])
    store.record_artifact(_art("c", "C"), [("A", "x")])
    assert [(n.content_hash, n.depth) for n in store.lineage_chain("A")] == [("A", 0), ("B", 1), ("C", 2)]


def test_rounds_and_latest_round(store: LineageStore) -> None:
    assert store.rounds("exp") == [] and store.latest_round("exp") is None
    store.record_artifact(_art("episodes", "e0", round_=0))
    store.record_artifact(_art("episodes", "e1", round_=1))
    store.record_artifact(_art("checkpoint", "c0", round_=0))
    assert store.rounds("exp") == [0, 1]
    assert store.latest_round("exp") == 1
    assert store.latest_round("exp", kind="checkpoint") == 0
    assert store.latest_round("exp", kind="evaluation") is None


def test_runs_and_evaluations_upsert(store: LineageStore) -> None:
    store.record_run(RunRecord("d1", "exp", 0, "rollouts", "m1", "v1", {"n": 1}))
    store.record_run(RunRecord("d1", "exp", 0, "rollouts", "m2", "v2", {"n": 2}))
    store.record_run(RunRecord("d1", "exp", 0, "scores"))
    store.record_run(RunRecord("d2", "exp", 1, "rollouts"))
    assert _count(store, "runs") == 3
    r0 = store.runs("exp", round=0)
    assert [(r.asset, r.mlflow_run_id, dict(r.config)) for r in r0] == [
        ("rollouts", "m2", {"n": 2}),
        ("scores", None, {}),
    ]
    assert len(store.runs("exp")) == 3
    store.record_evaluation(EvaluationRecord("exp", 1, "ck1", 0.5, 1.0, 3.0, 0.1, 64))
    store.record_evaluation(EvaluationRecord("exp", 0, "ck0", 0.2, 0.0, 4.0, 0.3, 64))
    store.record_evaluation(EvaluationRecord("exp", 1, "ck1b", 0.6, 1.2, 2.5, 0.0, 64))
    evals = store.evaluations("exp")
    assert [(e.round, e.policy_hash, e.success_rate) for e in evals] == [(0, "ck0", 0.2), (1, "ck1b", 0.6)]
    assert evals[0].created_at is not None


def test_verify_reports_changed_missing_and_dangling(store: LineageStore, tmp_path: Path) -> None:
    episodes = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), tmp_path / "exp/0/episodes.parquet")
    scores = write_parquet_atomic(pd.DataFrame({"s": [0.5]}), tmp_path / "exp/0/scores.parquet")
    with atomic_directory(tmp_path / "exp/0/checkpoint") as folder:
        (folder / "model.safetensors").write_bytes(b"weights")
    checkpoint = str(tmp_path / "exp/0/checkpoint")
    ck_hash = hash_directory(checkpoint)
    with atomic_directory(tmp_path / "models/tiny") as folder:
        (folder / "config.json").write_text("{}")
    policy0 = hash_directory(tmp_path / "models/tiny")
    store.record_initial_policy("exp", str(tmp_path / "models/tiny"), policy0)
    store.record_artifact(
        ArtifactRecord("exp", 0, "episodes", episodes.path, episodes.content_hash),
        [(policy0, "generated_from")],
    )
    store.record_artifact(
        ArtifactRecord("exp", 0, "scores", scores.path, scores.content_hash),
        [(episodes.content_hash, "scored_from")],
    )
    store.record_artifact(
        ArtifactRecord("exp", 0, "checkpoint", checkpoint, ck_hash),
        [(scores.content_hash, "trained_from"), ("deadbeef", "trained_from")],
    )
    problems = store.verify("exp")
    assert [(p.kind, p.expected_hash) for p in problems] == [("dangling", "deadbeef")]
    assert problems[0].path == checkpoint

    Path(scores.path).unlink()
    (Path(checkpoint) / "model.safetensors").write_bytes(b"tampered")
    problems = store.verify("exp")
    by_kind = {p.kind: p for p in problems}
    assert len(problems) == 4 and set(by_kind) == {"missing", "changed", "dangling", "consumed"}
    assert by_kind["missing"].path == scores.path and by_kind["missing"].actual_hash is None
    assert by_kind["changed"].path == checkpoint
    assert by_kind["changed"].expected_hash == ck_hash
    assert by_kind["changed"].actual_hash == hash_directory(checkpoint)
    assert "trained_from" in by_kind["dangling"].detail
    assert store.verify("other-experiment") == []


def test_a_catalog_from_a_newer_duckdb_is_refused_with_the_way_to_move_it(tmp_path: Path) -> None:
    """creditline pinned DuckDB 2.0.0 before 1.5.5; 1.5.5 cannot read a file 2.0.0 wrote (its header says
    storage version 999). tests/data/duckdb/ holds such a file, made by DuckDB 2.0.0 (connect, close): the
    error names the file and how to export and import it, at once (it is not a lock to wait for)."""
    old = tmp_path / "lineage.duckdb"
    old.write_bytes(
        (Path(__file__).parents[1] / "data" / "duckdb" / "written-by-duckdb-2.0.0.duckdb").read_bytes()
    )
    with pytest.raises(CatalogTooNewError) as info:
        LineageStore(old, RetryPolicy(timeout_s=5)).experiments()
    assert (
        str(old) in str(info.value)
        and "EXPORT DATABASE" in str(info.value)
        and "IMPORT DATABASE" in str(info.value)
    )


def test_a_corrupt_catalog_is_an_error_at_once_not_a_lock_to_wait_for(tmp_path: Path) -> None:
    """DuckDB's message for a bad checksum says "block", which once read as "lock": 30 s of retries."""
    store = LineageStore(tmp_path / "lineage.duckdb", RetryPolicy(timeout_s=5))
    store.register_experiment("exp", {"a": 1})
    with open(store.path, "r+b") as fh:
        fh.seek(12)
        fh.write((65).to_bytes(8, "little"))  # the header no longer matches its checksum
    start = time.monotonic()
    with pytest.raises(CatalogDamagedError, match="checksum.*restore it from a backup"):
        LineageStore(store.path, RetryPolicy(timeout_s=5)).experiments()
    assert time.monotonic() - start < 2
