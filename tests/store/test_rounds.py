"""Round completeness: a round with artifacts but no commit, and a commit that no longer matches."""

from creditline.store import ArtifactRecord, EvaluationRecord, LineageStore
from creditline.store.rounds import (
    ROUND_KINDS,
    RoundCommit,
    record_round_commit,
    round_commits,
    round_problems,
)


def _record_round(store: LineageStore, round_: int, kinds=ROUND_KINDS) -> dict[str, str]:
    hashes = {kind: f"{kind}-{round_}".ljust(64, "0") for kind in kinds}
    for kind, digest in hashes.items():
        store.record_artifact(ArtifactRecord("exp", round_, kind, f"/nowhere/{kind}", digest))
    return hashes


def test_a_round_without_its_commit_point_is_incomplete(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    _record_round(store, 1, ("episodes", "steps"))
    (problem,) = round_problems(store, "exp")
    assert problem.kind == "incomplete"
    assert (
        problem.detail
        == "exp/1: round has ['episodes', 'steps'] but no commit point; `creditline run` completes it"
    )


def test_a_committed_round_is_clean_until_an_artifact_or_its_evaluation_changes(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    hashes = _record_round(store, 1)
    store.record_evaluation(EvaluationRecord("exp", 1, hashes["checkpoint"], 0.5, 0.1, 3.0, 0.0, 8))
    record_round_commit(store, RoundCommit("exp", 1, "dagster-run", "mlflow-run", hashes))
    assert round_problems(store, "exp") == [] and sorted(round_commits(store, "exp")) == [1]
    store.record_artifact(ArtifactRecord("exp", 1, "scores", "/nowhere/scores", "f" * 64))  # re-recorded
    (problem,) = round_problems(store, "exp")
    assert (problem.kind, problem.expected_hash, problem.actual_hash) == (
        "uncommitted",
        hashes["scores"],
        "f" * 64,
    )
    store.execute("DELETE FROM evaluations WHERE round = 1", [])
    assert [p.kind for p in round_problems(store, "exp")] == ["uncommitted", "incomplete"]
