"""The lineage catalog: which artifact came from which, in one DuckDB file beside the Parquet data.

Assets write their tables with ``files.write_parquet_atomic`` and then register them here with their
content hash and the hashes of their parents. That is what lets a person ask "which rollouts, rubric
version and advantage estimator produced this checkpoint?" (``lineage_chain``), lets round N find round
N-1's checkpoint (``artifact``), and lets an asset check confirm that nothing on disk drifted (``verify``).

Each public method is one transaction on a fresh, short connection (see ``connection``), so several
Dagster step processes can share the file; keys are upserted, so re-running a step replaces its rows and
its lineage edges instead of duplicating them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from creditline.store.connection import RetryPolicy, run_transaction
from creditline.store.errors import ExperimentConfigMismatch
from creditline.store.files import canonical_json, config_hash, hash_path
from creditline.store.records import ArtifactRecord, EvaluationRecord, LineageNode, Problem, RunRecord
from creditline.store.schema import create_schema

T = TypeVar("T")

INITIAL_POLICY_KIND = "checkpoint"
INITIAL_POLICY_VARIANT = "initial"
"""The initial policy is the round-0 checkpoint with this variant, so it never collides with the
checkpoint that round 0 trains (variant "")."""

_KEY_MATCH = "experiment = ? AND round = ? AND kind = ? AND variant = ?"
_ARTIFACT_COLUMNS = (
    "experiment, round, kind, variant, path, content_hash, rows, meta_json, created_at, dagster_run_id"
)
_RUN_COLUMNS = (
    "dagster_run_id, experiment, round, asset, mlflow_run_id, code_version, config_json, created_at"
)
_EVALUATION_COLUMNS = (
    "experiment, round, policy_hash, success_rate, mean_return, mean_steps, invalid_action_rate, "
    "episodes, created_at"
)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _artifact_from_row(row: Sequence[Any]) -> ArtifactRecord:
    experiment, round_, kind, variant, path, content_hash, rows, meta_json, created_at, run_id = row
    return ArtifactRecord(
        experiment=experiment,
        round=round_,
        kind=kind,
        variant=variant,
        path=path,
        content_hash=content_hash,
        rows=rows,
        meta=json.loads(meta_json),
        dagster_run_id=run_id,
        created_at=created_at,
    )


def _run_from_row(row: Sequence[Any]) -> RunRecord:
    run_id, experiment, round_, asset, mlflow_run_id, code_version, config_json, created_at = row
    return RunRecord(
        run_id, experiment, round_, asset, mlflow_run_id, code_version, json.loads(config_json), created_at
    )


def _checked_parents(child_hash: str, parents: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Deduplicate (parent_hash, relation) pairs; reject self-edges and one parent with two relations."""
    relations: dict[str, str] = {}
    for parent_hash, relation in parents:
        if parent_hash == child_hash:
            raise ValueError(f"artifact {child_hash} cannot be its own parent")
        if relations.setdefault(parent_hash, relation) != relation:
            raise ValueError(
                f"parent {parent_hash} given with two relations: {relations[parent_hash]!r}, {relation!r}"
            )
    return sorted(relations.items())


class LineageStore:
    """The DuckDB lineage catalog at ``path`` (created with its schema on first use)."""

    def __init__(self, path: str | os.PathLike[str], retry: RetryPolicy | None = None) -> None:
        self.path = str(path)
        self.retry = retry or RetryPolicy()
        self._schema_ready = False

    def __repr__(self) -> str:
        return f"LineageStore({self.path!r})"

    def _run(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work`` as one retried transaction, creating the schema in the first one."""
        needs_schema = not self._schema_ready

        def transaction(con: duckdb.DuckDBPyConnection) -> T:
            if needs_schema:
                create_schema(con)
            return work(con)

        if needs_schema:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        result = run_transaction(self.path, transaction, self.retry)
        self._schema_ready = True
        return result

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._run(lambda con: con.execute(sql, params).fetchall())

    def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._run(lambda con: con.execute(sql, params).fetchone())

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        self._run(lambda con: con.execute(sql, params))

    # --- experiments ---------------------------------------------------------------------------------

    def register_experiment(self, name: str, config: Mapping[str, Any]) -> str:
        """Register ``name`` with its config and return the config hash; a no-op if already identical.

        Raises ``ExperimentConfigMismatch`` if ``name`` exists with a different config.
        """
        config = dict(config)
        new_hash = config_hash(config)

        def work(con: duckdb.DuckDBPyConnection) -> None:
            row = con.execute("SELECT config_hash FROM experiments WHERE experiment = ?", [name]).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO experiments VALUES (?, ?, ?, ?)",
                    [name, canonical_json(config), new_hash, _now()],
                )
            elif row[0] != new_hash:
                raise ExperimentConfigMismatch(name, row[0], new_hash)

        self._run(work)
        return new_hash

    def experiment_config(self, name: str) -> dict[str, Any] | None:
        """The config ``name`` was registered with, or ``None`` for an unknown experiment."""
        row = self._fetchone("SELECT config_json FROM experiments WHERE experiment = ?", [name])
        return None if row is None else json.loads(row[0])

    def experiments(self) -> list[str]:
        """All registered experiment names, sorted."""
        rows = self._fetchall("SELECT experiment FROM experiments ORDER BY experiment")
        return [r[0] for r in rows]

    # --- artifacts and their edges -------------------------------------------------------------------

    def record_artifact(
        self, artifact: ArtifactRecord, parents: Sequence[tuple[str, str]] = ()
    ) -> ArtifactRecord:
        """Upsert ``artifact`` and replace its lineage edges with ``parents`` ((parent_hash, relation)).

        In one transaction: the row for (experiment, round, kind, variant) is replaced; the edges of its
        new hash are replaced by ``parents``; the edges of the hash it replaced are dropped unless another
        artifact still carries that hash. Returns the stored record (with ``created_at``).
        """
        edges = _checked_parents(artifact.content_hash, parents)
        stored = dataclasses.replace(artifact, meta=dict(artifact.meta), created_at=_now())
        key = [stored.experiment, stored.round, stored.kind, stored.variant]

        def work(con: duckdb.DuckDBPyConnection) -> None:
            old = con.execute(f"SELECT content_hash FROM artifacts WHERE {_KEY_MATCH}", key).fetchone()
            con.execute(
                f"INSERT OR REPLACE INTO artifacts ({_ARTIFACT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [*key, stored.path, stored.content_hash, stored.rows, canonical_json(stored.meta),
                 stored.created_at, stored.dagster_run_id],
            )  # fmt: skip
            stale = [stored.content_hash]
            if old is not None and old[0] != stored.content_hash:
                still_used = con.execute(
                    "SELECT count(*) FROM artifacts WHERE content_hash = ?", [old[0]]
                ).fetchone()
                if still_used is not None and still_used[0] == 0:
                    stale.append(old[0])
            con.execute("DELETE FROM lineage WHERE list_contains(?, child_hash)", [stale])
            if edges:
                con.executemany(
                    "INSERT INTO lineage VALUES (?, ?, ?)",
                    [[stored.content_hash, p, rel] for p, rel in edges],
                )

        self._run(work)
        return stored

    def record_initial_policy(
        self, experiment: str, path: str, content_hash: str, meta: Mapping[str, Any] | None = None
    ) -> ArtifactRecord:
        """Register the policy that round 0 starts from: a root artifact (no parents)."""
        return self.record_artifact(
            ArtifactRecord(
                experiment=experiment,
                round=0,
                kind=INITIAL_POLICY_KIND,
                variant=INITIAL_POLICY_VARIANT,
                path=path,
                content_hash=content_hash,
                meta=dict(meta or {}),
            )
        )

    def initial_policy(self, experiment: str) -> ArtifactRecord | None:
        """The root checkpoint registered by ``record_initial_policy``, if any."""
        return self.artifact(experiment, 0, INITIAL_POLICY_KIND, INITIAL_POLICY_VARIANT)

    def artifact(self, experiment: str, round: int, kind: str, variant: str = "") -> ArtifactRecord | None:
        """The artifact stored under this key, or ``None``."""
        row = self._fetchone(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE {_KEY_MATCH}",
            [experiment, round, kind, variant],
        )
        return None if row is None else _artifact_from_row(row)

    def artifacts(
        self, experiment: str, round: int | None = None, kind: str | None = None
    ) -> list[ArtifactRecord]:
        """An experiment's artifacts, optionally for one round and/or kind, ordered by (round, kind, variant)."""
        sql = f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE experiment = ?"
        params: list[Any] = [experiment]
        if round is not None:
            sql += " AND round = ?"
            params.append(round)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self._fetchall(sql + " ORDER BY round, kind, variant", params)
        return [_artifact_from_row(r) for r in rows]

    def artifact_by_hash(self, content_hash: str) -> list[ArtifactRecord]:
        """Every artifact row carrying ``content_hash`` (usually one; identical outputs share a hash)."""
        rows = self._fetchall(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE content_hash = ? "
            "ORDER BY experiment, round, kind, variant",
            [content_hash],
        )
        return [_artifact_from_row(r) for r in rows]

    def rounds(self, experiment: str) -> list[int]:
        """Rounds of ``experiment`` that have at least one artifact, ascending."""
        rows = self._fetchall(
            "SELECT DISTINCT round FROM artifacts WHERE experiment = ? ORDER BY round", [experiment]
        )
        return [r[0] for r in rows]

    def latest_round(self, experiment: str, kind: str | None = None) -> int | None:
        """The highest round with an artifact (of ``kind``, if given), or ``None``."""
        sql, params = "SELECT max(round) FROM artifacts WHERE experiment = ?", [experiment]
        if kind is not None:
            sql, params = sql + " AND kind = ?", [experiment, kind]
        row = self._fetchone(sql, params)
        return None if row is None else row[0]

    # --- runs and evaluations ------------------------------------------------------------------------

    def record_run(self, run: RunRecord) -> RunRecord:
        """Upsert one (Dagster run, asset) row; returns it with ``created_at``."""
        stored = dataclasses.replace(run, config=dict(run.config), created_at=_now())
        s = stored
        self._execute(
            f"INSERT OR REPLACE INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [s.dagster_run_id, s.experiment, s.round, s.asset, s.mlflow_run_id, s.code_version,
             canonical_json(s.config), s.created_at],
        )  # fmt: skip
        return stored

    def runs(self, experiment: str, round: int | None = None) -> list[RunRecord]:
        """Runs recorded for ``experiment`` (optionally one round), ordered by (round, created_at, asset)."""
        sql, params = f"SELECT {_RUN_COLUMNS} FROM runs WHERE experiment = ?", [experiment]
        if round is not None:
            sql, params = sql + " AND round = ?", [experiment, round]
        rows = self._fetchall(sql + " ORDER BY round, created_at, asset", params)
        return [_run_from_row(r) for r in rows]

    def record_evaluation(self, evaluation: EvaluationRecord) -> EvaluationRecord:
        """Upsert the evaluation of (experiment, round); returns it with ``created_at``."""
        e = dataclasses.replace(evaluation, created_at=_now())
        self._execute(
            f"INSERT OR REPLACE INTO evaluations ({_EVALUATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [e.experiment, e.round, e.policy_hash, e.success_rate, e.mean_return, e.mean_steps,
             e.invalid_action_rate, e.episodes, e.created_at],
        )  # fmt: skip
        return e

    def evaluations(self, experiment: str) -> list[EvaluationRecord]:
        """An experiment's evaluations, ordered by round."""
        rows = self._fetchall(
            f"SELECT {_EVALUATION_COLUMNS} FROM evaluations WHERE experiment = ? ORDER BY round", [experiment]
        )
        return [EvaluationRecord(*r) for r in rows]

    # --- walking and auditing lineage ----------------------------------------------------------------

    def parents(self, content_hash: str) -> list[tuple[str, str]]:
        """Direct parents of ``content_hash`` as (parent_hash, relation), sorted by parent hash."""
        rows = self._fetchall(
            "SELECT parent_hash, relation FROM lineage WHERE child_hash = ? ORDER BY parent_hash",
            [content_hash],
        )
        return [(p, rel) for p, rel in rows]

    def lineage_chain(self, content_hash: str) -> list[LineageNode]:
        """``content_hash`` (depth 0) and every ancestor once, at its shortest depth, ordered by depth.

        A recursive CTE with set semantics (``UNION``) collects the ancestors, so it terminates even on
        a cycle and does not enumerate paths (which would explode across rounds whose steps share
        parents); depths and the edge each node was reached by come from a breadth-first pass in Python.
        """

        def work(con: duckdb.DuckDBPyConnection) -> tuple[list[Any], list[Any]]:
            edges = con.execute(
                """
                WITH RECURSIVE ancestors(hash) AS (
                    SELECT ?::VARCHAR
                    UNION
                    SELECT l.parent_hash FROM lineage l JOIN ancestors a ON l.child_hash = a.hash
                )
                SELECT l.child_hash, l.parent_hash, l.relation
                FROM lineage l JOIN ancestors a ON l.child_hash = a.hash
                ORDER BY l.child_hash, l.parent_hash
                """,
                [content_hash],
            ).fetchall()
            hashes = sorted({content_hash} | {parent for _, parent, _ in edges})
            rows = con.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE list_contains(?, content_hash) "
                "ORDER BY experiment, round, kind, variant",
                [hashes],
            ).fetchall()
            return edges, rows

        edges, rows = self._run(work)
        by_hash: dict[str, list[ArtifactRecord]] = {}
        for record in map(_artifact_from_row, rows):
            by_hash.setdefault(record.content_hash, []).append(record)
        children: dict[str, list[tuple[str, str]]] = {}
        for child, parent, relation in edges:
            children.setdefault(child, []).append((parent, relation))

        nodes = [LineageNode(content_hash, 0, "", None, tuple(by_hash.get(content_hash, ())))]
        seen, frontier, depth = {content_hash}, [content_hash], 0
        while frontier:
            depth += 1
            next_frontier = []
            for child in frontier:
                for parent, relation in children.get(child, ()):
                    if parent in seen:
                        continue
                    seen.add(parent)
                    next_frontier.append(parent)
                    nodes.append(LineageNode(parent, depth, relation, child, tuple(by_hash.get(parent, ()))))
            frontier = sorted(next_frontier)
        return nodes

    def verify(self, experiment: str) -> list[Problem]:
        """Re-hash every artifact of ``experiment`` and check its edges; return what disagrees.

        "missing": the recorded path no longer exists (only local paths can be checked); "changed": it
        hashes differently than recorded; "dangling": an edge of one of the experiment's artifacts points
        at a parent hash that no artifact row carries (register roots such as the initial policy).
        """
        problems = [p for record in self.artifacts(experiment) if (p := check_on_disk(record))]
        dangling = self._fetchall(
            """
            SELECT DISTINCT a.path, a.experiment, a.round, a.kind, a.variant, l.parent_hash, l.relation
            FROM lineage l JOIN artifacts a ON a.content_hash = l.child_hash
            WHERE a.experiment = ? AND l.parent_hash NOT IN (SELECT content_hash FROM artifacts)
            ORDER BY a.round, a.kind, a.variant, l.parent_hash
            """,
            [experiment],
        )
        for path, exp, round_, kind, variant, parent_hash, relation in dangling:
            where = _describe(exp, round_, kind, variant)
            detail = f"{where} is {relation} {parent_hash}, which no artifact carries"
            problems.append(Problem("dangling", path, parent_hash, None, detail))
        return problems


def check_on_disk(record: ArtifactRecord) -> Problem | None:
    """A "missing" or "changed" problem if the recorded path no longer holds the recorded content.

    The one place that re-hashes an artifact: readers, asset checks, the audit and ``verify`` all ask it.
    """
    where = _describe(record.experiment, record.round, record.kind, record.variant)
    if not os.path.exists(record.path):
        return Problem(
            "missing", record.path, record.content_hash, None, f"{where}: {record.path} does not exist"
        )
    actual = hash_path(record.path)
    if actual != record.content_hash:
        detail = f"{where}: {record.path} changed (recorded {record.content_hash[:12]}, now {actual[:12]})"
        return Problem("changed", record.path, record.content_hash, actual, detail)
    return None


def _describe(experiment: str, round_: int, kind: str, variant: str) -> str:
    return f"{experiment}/{round_}/{kind}" + (f"[{variant}]" if variant else "")
