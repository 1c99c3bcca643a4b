"""A round's bookkeeping in the lineage store: its tracking run and its commit point.

A round is done only when its commit row exists. The last stage writes it after every artifact of
the round is recorded and its tracking is logged and closed, so a process killed anywhere before
leaves a round without a commit, which the next `creditline run` (or the round sensor) completes.
The commit lists the content hash of every artifact of the round, so `verify` can check that the
round it describes is still the one on disk.

The MLflow run of each round is created once and its id recorded here (first writer wins); round 0
holds the experiment's parent run, on which round-level metrics form learning curves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb

from creditline.ids import canonical_json
from creditline.store.lineage import LineageStore
from creditline.store.records import Problem

EXPERIMENT_RUN_ROUND = 0
"""`tracking_runs` row of the experiment's parent run."""


@dataclass(frozen=True)
class RoundCommit:
    experiment: str
    round: int
    dagster_run_id: str
    mlflow_run_id: str
    artifacts: dict[str, str] = field(default_factory=dict)
    """{kind: content hash} of every artifact the round produced."""
    committed_at: datetime | None = None


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def record_round_commit(store: LineageStore, commit: RoundCommit) -> RoundCommit:
    """Write (or rewrite, on a re-run) the round's commit point."""
    stored = RoundCommit(**{**vars(commit), "committed_at": _now()})
    store.execute(
        "INSERT OR REPLACE INTO round_commits VALUES (?, ?, ?, ?, ?, ?)",
        [
            stored.experiment,
            stored.round,
            stored.dagster_run_id,
            stored.mlflow_run_id,
            canonical_json(stored.artifacts),
            stored.committed_at,
        ],
    )
    return stored


def round_commits(store: LineageStore, experiment: str) -> dict[int, RoundCommit]:
    """{round: commit} of every committed (finished) round of `experiment`."""
    rows = store.fetchall(
        "SELECT experiment, round, dagster_run_id, mlflow_run_id, artifacts_json, committed_at "
        "FROM round_commits WHERE experiment = ? ORDER BY round",
        [experiment],
    )
    return {r[1]: RoundCommit(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows}


def tracking_run_id(store: LineageStore, experiment: str, round_: int) -> str | None:
    row = store.fetchone(
        "SELECT mlflow_run_id FROM tracking_runs WHERE experiment = ? AND round = ?", [experiment, round_]
    )
    return None if row is None else row[0]


def record_tracking_run(store: LineageStore, experiment: str, round_: int, run_id: str) -> str:
    """Record `run_id` as the round's tracking run unless one is recorded; return the recorded one."""

    def work(con: duckdb.DuckDBPyConnection) -> str:
        con.execute(
            "INSERT INTO tracking_runs VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [experiment, round_, run_id, _now()],
        )
        row = con.execute(
            "SELECT mlflow_run_id FROM tracking_runs WHERE experiment = ? AND round = ?", [experiment, round_]
        ).fetchone()
        assert row is not None
        return row[0]

    return store.transaction(work)


def tracking_runs(store: LineageStore, experiment: str) -> dict[int, str]:
    rows = store.fetchall(
        "SELECT round, mlflow_run_id FROM tracking_runs WHERE experiment = ? ORDER BY round", [experiment]
    )
    return dict(rows)


ROUND_KINDS = ("episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation")
"""Every artifact kind a finished round has recorded."""
OPTIONAL_ROUND_KINDS = ("reward_model", "model_rewards")
"""Kinds only some rounds record (a step-reward model's, for the estimators that read one); committed when
there."""


def round_problems(store: LineageStore, experiment: str) -> list[Problem]:
    """Rounds that are not complete, or whose commit no longer describes what is recorded.

    "incomplete": a round has artifacts but no commit point (a run died or failed; `creditline run`
    completes it). For a committed round: every kind in ROUND_KINDS recorded, with the hash the
    commit lists ("uncommitted" otherwise), and its evaluation row present.
    """
    commits = round_commits(store, experiment)
    evaluated = {e.round for e in store.evaluations(experiment)}
    by_round: dict[int, dict[str, str]] = {}
    for record in store.artifacts(experiment):
        if record.round >= 1 and record.variant == "":
            by_round.setdefault(record.round, {})[record.kind] = record.content_hash
    problems = []
    for round_ in sorted(set(by_round) | set(commits)):
        where = f"{experiment}/{round_}"
        recorded = by_round.get(round_, {})
        commit = commits.get(round_)
        if commit is None:
            problems.append(
                Problem(
                    "incomplete",
                    where,
                    "",
                    None,
                    f"{where}: round has {sorted(recorded)} but no commit point; "
                    "`creditline run` completes it",
                )
            )
            continue
        for kind in (*ROUND_KINDS, *OPTIONAL_ROUND_KINDS):
            if recorded.get(kind) != commit.artifacts.get(kind):
                problems.append(
                    Problem(
                        "uncommitted",
                        where,
                        commit.artifacts.get(kind, ""),
                        recorded.get(kind),
                        f"{where}/{kind}: recorded {str(recorded.get(kind))[:12]}, "
                        f"committed {str(commit.artifacts.get(kind))[:12]}",
                    )
                )
        if round_ not in evaluated:
            problems.append(
                Problem("incomplete", where, "", None, f"{where}: committed without an evaluation row")
            )
    return problems
