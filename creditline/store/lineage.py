"""The lineage catalog: which artifact came from which, in one DuckDB file beside the Parquet data.

Assets write their tables with ``files.write_parquet_atomic`` and then register them here with their
content hash and the hashes of their parents. That is what lets a person ask "which rollouts, rubric
version and advantage estimator produced this checkpoint?" (``lineage_chain``), lets round N find round
N-1's checkpoint (``artifact``), and lets an asset check confirm that nothing on disk drifted (``verify``).

Each public method is one transaction on a fresh, short connection (see ``connection``), so several
Dagster step processes can share the file; keys are upserted, so re-running a step replaces its rows and
its lineage edges instead of duplicating them.

An artifact's parents are kept twice, on purpose: as declared on its row (``parents_json``) and as
``lineage`` edges keyed by hash, which the recursive walks need. The edges of a hash are the union of the
parents declared by the rows that carry it, so ``verify`` can compare the two both ways and notice an edge
deleted or added behind the store's back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from creditline.config.deployment import redact
from creditline.faults import failpoint
from creditline.ids import canonical_json
from creditline.store.connection import (
    RetryPolicy,
    held_connection,
    is_postgres,
    one_transaction,
    run_in_transaction,
    run_transaction,
)
from creditline.store.errors import ExperimentConfigMismatch
from creditline.store.files import (
    config_hash,
    directory_manifest,
    hash_path,
    manifest_hash,
    stat_fingerprint,
)
from creditline.store.objects import ObjectStore
from creditline.store.records import (
    ArtifactRecord,
    EvaluationRecord,
    LineageNode,
    Problem,
    ProblemKind,
    RunRecord,
)
from creditline.store.root_paths import resolved_path, stored_path
from creditline.store.schema import create_schema

T = TypeVar("T")

INITIAL_POLICY_KIND = "checkpoint"
INITIAL_POLICY_VARIANT = "initial"
"""The initial policy is the round-0 checkpoint with this variant, so it never collides with the
checkpoint that round 0 trains (variant "")."""

_KEY_MATCH = "experiment = ? AND round = ? AND kind = ? AND variant = ?"
_ARTIFACT_COLUMNS = (
    "experiment, round, kind, variant, path, content_hash, rows, meta_json, created_at, dagster_run_id, "
    "parents_json"
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


def _artifact_from_row(row: Sequence[Any], data_root: str | None) -> ArtifactRecord:
    experiment, round_, kind, variant, path, content_hash, rows, meta_json, created_at, run_id, parents = row
    return ArtifactRecord(
        experiment=experiment,
        round=round_,
        kind=kind,
        variant=variant,
        path=resolved_path(path, data_root),
        content_hash=content_hash,
        rows=rows,
        meta=json.loads(meta_json),
        dagster_run_id=run_id,
        created_at=created_at,
        parents=tuple((parent, relation) for parent, relation in json.loads(parents)),
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


def _rebuild_edges(con: duckdb.DuckDBPyConnection, hashes: list[str]) -> None:
    """Make the edges of each of ``hashes`` the union of the parents declared by the rows carrying it."""
    rows = con.execute(
        "SELECT content_hash, parents_json FROM artifacts WHERE list_contains(?, content_hash)", [hashes]
    ).fetchall()
    relations: dict[tuple[str, str], str] = {}
    for child, parents_json in rows:
        for parent, relation in json.loads(parents_json):
            if relations.setdefault((child, parent), relation) != relation:
                raise ValueError(
                    f"artifacts sharing hash {child[:12]} declare parent {parent[:12]} with two relations: "
                    f"{relations[child, parent]!r}, {relation!r}"
                )
    con.execute("DELETE FROM lineage WHERE list_contains(?, child_hash)", [hashes])
    if relations:
        con.executemany(
            "INSERT INTO lineage VALUES (?, ?, ?)", [[c, p, rel] for (c, p), rel in sorted(relations.items())]
        )


class LineageStore:
    """The lineage catalog at ``path``, a DuckDB file or a ``postgresql://`` URI (created with its schema on
    first use)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        retry: RetryPolicy | None = None,
        objects: ObjectStore | None = None,
        data_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = str(path)
        self.retry = retry or RetryPolicy()
        self.objects = objects
        """Where every recorded artifact is published before its record (`creditline.store.objects`); None:
        nowhere."""
        if data_root is None and not is_postgres(self.path):
            data_root = Path(self.path).absolute().parent  # the catalog is `<data_root>/lineage.duckdb`
        self.data_root = None if data_root is None else os.path.abspath(data_root)
        """Artifact paths under it are recorded relative to it and read back resolved against it
        (`creditline.store.root_paths`); None (a Postgres catalog opened without one): paths as given."""
        self._schema_ready = False
        self._session = threading.local()  # .con: the connection a `session` block holds on this thread

    def __repr__(self) -> str:
        return f"LineageStore({redact(self.path)!r})"

    def transaction(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work`` as one retried transaction, creating the schema in the first one. Inside an atomic
        `session` it is part of the session's one transaction instead."""
        needs_schema = not self._schema_ready

        def with_schema(con: duckdb.DuckDBPyConnection) -> T:
            if needs_schema:
                create_schema(con, self.data_root)
            return work(con)

        if needs_schema and not is_postgres(self.path):
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        held = getattr(self._session, "con", None)
        if held is not None and self._session.atomic:
            result = with_schema(held)  # committed (or rolled back) with the session
            self._session.schema_made = self._session.schema_made or needs_schema
            return result
        if held is not None:
            result = run_in_transaction(held, with_schema)
        else:
            result = run_transaction(self.path, with_schema, self.retry)
        self._schema_ready = True
        return result

    @contextlib.contextmanager
    def session(self, atomic: bool = False) -> Iterator[LineageStore]:
        """The calls inside the block share one connection (each still its own transaction, unless `atomic`).

        For a burst of lineage calls, such as a stage's reads before its work, or its records after: the
        catalog file stays locked against other processes until the block ends, so never wrap the work
        itself. Nested sessions use the outer one; other threads wait for the block to end.

        `atomic`: the block's calls are one transaction instead, committed when the block ends and rolled
        back if it raises, so a process killed inside it leaves none of them recorded. A stage's records
        are (`assets.stage.Stage.produce`): one commit (one write-ahead-log flush) instead of one per record.
        Nothing can conflict with it: the file's lock keeps other processes out and `CATALOG_TURN` this
        process's other threads. A call that raises inside it is not undone alone: let the exception end the
        block. Inside an atomic session a session joins it; an atomic one inside a plain one is refused
        (`RuntimeError`): its calls would each commit on their own.

        On Postgres a session shares nothing, `atomic` included: a transaction there costs a cursor (~1 ms),
        locks no file, and must be free to retry alone when another writer's transaction conflicts with it.
        So there a killed process may leave a prefix of an atomic block's calls recorded, which every caller
        handles (records are upserts by key).
        """
        if getattr(self._session, "con", None) is not None and atomic and not self._session.atomic:
            raise RuntimeError("an atomic lineage session cannot open inside a plain one")
        if getattr(self._session, "con", None) is not None or is_postgres(self.path):
            yield self
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with held_connection(self.path, self.retry) as con:
            self._session.con, self._session.atomic, self._session.schema_made = con, atomic, False
            try:
                if atomic:
                    with one_transaction(con):
                        yield self
                    self._schema_ready = self._schema_ready or self._session.schema_made
                else:
                    yield self
            finally:
                self._session.con, self._session.atomic = None, False

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.transaction(lambda con: con.execute(sql, params).fetchall())

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.transaction(lambda con: con.execute(sql, params).fetchone())

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        self.transaction(lambda con: con.execute(sql, params))

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

        self.transaction(work)
        return new_hash

    def experiment_config(self, name: str) -> dict[str, Any] | None:
        """The config ``name`` was registered with, or ``None`` for an unknown experiment."""
        row = self.fetchone("SELECT config_json FROM experiments WHERE experiment = ?", [name])
        return None if row is None else json.loads(row[0])

    def experiments(self) -> list[str]:
        """All registered experiment names, sorted."""
        rows = self.fetchall("SELECT experiment FROM experiments ORDER BY experiment")
        return [r[0] for r in rows]

    # --- artifacts and their edges -------------------------------------------------------------------

    def record_artifact(
        self, artifact: ArtifactRecord, parents: Sequence[tuple[str, str]] | None = None
    ) -> ArtifactRecord:
        """Upsert ``artifact`` with its declared ``parents`` ((parent_hash, relation); default
        ``artifact.parents``) and bring the lineage edges in line with them.

        In one transaction: the row for (experiment, round, kind, variant) is replaced; the edges of its
        new hash, and of the hash it replaced, are rebuilt as the union of the parents declared by the rows
        that carry that hash (none: the replaced hash's edges go). Raises ``ValueError`` if two rows of one
        hash declare one parent with different relations. Returns the stored record (with ``created_at``,
        sorted ``parents``). With ``objects``, the artifact is published there first and ``meta["object"]``
        names it. A ``meta["on_disk"]`` fingerprint must come from the writer, taken when it
        hashed the bytes (`FileRecord.fingerprint`, `hashed_folder`): only then does it vouch
        for them. It is bound to the hash it was taken with (``meta["on_disk_of"]``, added here when the
        writer did not): a reader trusts it for that hash only.
        """
        edges = _checked_parents(artifact.content_hash, artifact.parents if parents is None else parents)
        if artifact.meta.get(FINGERPRINT) is not None and FINGERPRINT_OF not in artifact.meta:
            artifact = dataclasses.replace(
                artifact, meta={**artifact.meta, FINGERPRINT_OF: artifact.content_hash}
            )
        if self.objects is not None and "object" not in artifact.meta:  # the bytes first, then the record
            published = self.objects.publish(artifact.path, artifact.content_hash)
            artifact = dataclasses.replace(artifact, meta={**artifact.meta, "object": published})
        stored = dataclasses.replace(artifact, created_at=_now(), parents=tuple(edges))
        key = [stored.experiment, stored.round, stored.kind, stored.variant]

        def work(con: duckdb.DuckDBPyConnection) -> None:
            old = con.execute(f"SELECT content_hash FROM artifacts WHERE {_KEY_MATCH}", key).fetchone()
            # a new key needs no OR REPLACE, whose conflict check costs DuckDB ~3.3 ms a row against ~1.2 ms
            # for a plain INSERT (DuckDB 1.5, a round's catalog, 2026-11-29); a round records seven new rows
            con.execute(
                f"INSERT {'OR REPLACE ' if old else ''}INTO artifacts ({_ARTIFACT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    *key,
                    stored_path(stored.path, self.data_root),
                    stored.content_hash,
                    stored.rows,
                    canonical_json(stored.meta),
                    stored.created_at,
                    stored.dagster_run_id,
                    canonical_json(edges),
                ],
            )
            _rebuild_edges(con, sorted({stored.content_hash} | ({old[0]} if old else set())))
            failpoint(f"lineage:{stored.kind}")  # killed here: the transaction never commits

        self.transaction(work)
        return stored

    def _copy_problems(self, record: ArtifactRecord) -> list[Problem]:
        """What is wrong with `record`'s copies: its published object, and its local copy (which, for a
        published artifact, may be absent: a machine fetches only what it reads)."""
        published = self.objects is not None and "object" in record.meta
        found = [check_object(self.objects, record)] if published and self.objects is not None else []
        if os.path.exists(record.path) or not published:
            found.append(check_on_disk(record))
        return [problem for problem in found if problem is not None]

    def ensure_local(self, record: ArtifactRecord) -> ArtifactRecord:
        """`record`, its bytes on this machine's disk: fetched from object storage into place (hash-checked)
        when they are missing here and the record names an object. Otherwise nothing happens; a missing file
        with no object is left for the reader's check to report."""
        if self.objects is not None and "object" in record.meta and not Path(record.path).exists():
            self.objects.fetch_into_place(record.meta["object"], record.content_hash, record.path)
        return record

    def record_branches(self, steps_hash: str, links: Sequence[tuple[str, str, int]]) -> None:
        """Record the continuations of the steps table `steps_hash`: (episode_id, branch_of_episode,
        branch_of_step) each (`creditline.rollout.branching`); idempotent, keyed by the table's hash."""

        def work(con: duckdb.DuckDBPyConnection) -> None:
            con.execute("DELETE FROM branches WHERE steps_hash = ?", [steps_hash])
            if links:
                con.executemany(
                    "INSERT INTO branches VALUES (?, ?, ?, ?)",
                    [[steps_hash, e, src, int(t)] for e, src, t in links],
                )

        self.transaction(work)

    def branches(self, steps_hash: str) -> list[tuple[str, str, int]]:
        """(episode_id, branch_of_episode, branch_of_step) of the continuations in `steps_hash`, by
        episode_id."""
        return [
            tuple(r)
            for r in self.fetchall(
                "SELECT episode_id, branch_of_episode, branch_of_step FROM branches WHERE steps_hash = ? "
                "ORDER BY episode_id",
                [steps_hash],
            )
        ]

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
        row = self.fetchone(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE {_KEY_MATCH}",
            [experiment, round, kind, variant],
        )
        return None if row is None else _artifact_from_row(row, self.data_root)

    def artifacts(
        self, experiment: str, round: int | None = None, kind: str | None = None
    ) -> list[ArtifactRecord]:
        """An experiment's artifacts, optionally for one round and/or kind, ordered by (round, kind,
        variant)."""
        sql = f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE experiment = ?"
        params: list[Any] = [experiment]
        if round is not None:
            sql += " AND round = ?"
            params.append(round)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self.fetchall(sql + " ORDER BY round, kind, variant", params)
        return [_artifact_from_row(r, self.data_root) for r in rows]

    def artifact_by_hash(self, content_hash: str) -> list[ArtifactRecord]:
        """Every artifact row carrying ``content_hash`` (usually one; identical outputs share a hash)."""
        rows = self.fetchall(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE content_hash = ? "
            "ORDER BY experiment, round, kind, variant",
            [content_hash],
        )
        return [_artifact_from_row(r, self.data_root) for r in rows]

    def rounds(self, experiment: str) -> list[int]:
        """Rounds of ``experiment`` that have at least one artifact, ascending."""
        rows = self.fetchall(
            "SELECT DISTINCT round FROM artifacts WHERE experiment = ? ORDER BY round", [experiment]
        )
        return [r[0] for r in rows]

    def latest_round(self, experiment: str, kind: str | None = None) -> int | None:
        """The highest round with an artifact (of ``kind``, if given), or ``None``."""
        sql, params = "SELECT max(round) FROM artifacts WHERE experiment = ?", [experiment]
        if kind is not None:
            sql, params = sql + " AND kind = ?", [experiment, kind]
        row = self.fetchone(sql, params)
        return None if row is None else row[0]

    # --- runs and evaluations ------------------------------------------------------------------------

    def record_run(self, run: RunRecord) -> RunRecord:
        """Upsert one (Dagster run, asset) row; returns it with ``created_at``."""
        stored = dataclasses.replace(run, config=dict(run.config), created_at=_now())
        s = stored

        def work(con: duckdb.DuckDBPyConnection) -> None:
            key = [s.dagster_run_id, s.asset]
            old = con.execute("SELECT 1 FROM runs WHERE dagster_run_id = ? AND asset = ?", key).fetchone()
            # a new key needs no OR REPLACE, as in `record_artifact`: 1.5 ms against 3.0 (five a round)
            con.execute(
                f"INSERT {'OR REPLACE ' if old else ''}INTO runs ({_RUN_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    s.dagster_run_id,
                    s.experiment,
                    s.round,
                    s.asset,
                    s.mlflow_run_id,
                    s.code_version,
                    canonical_json(s.config),
                    s.created_at,
                ],
            )

        self.transaction(work)
        return stored

    def runs(self, experiment: str, round: int | None = None) -> list[RunRecord]:
        """Runs recorded for ``experiment`` (optionally one round), ordered by (round, created_at, asset)."""
        sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE experiment = ?"
        params: list[object] = [experiment]
        if round is not None:
            sql, params = sql + " AND round = ?", [experiment, round]
        rows = self.fetchall(sql + " ORDER BY round, created_at, asset", params)
        return [_run_from_row(r) for r in rows]

    def record_evaluation(self, evaluation: EvaluationRecord) -> EvaluationRecord:
        """Upsert the evaluation of (experiment, round); returns it with ``created_at``."""
        e = dataclasses.replace(evaluation, created_at=_now())
        self.execute(
            f"INSERT OR REPLACE INTO evaluations ({_EVALUATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                e.experiment,
                e.round,
                e.policy_hash,
                e.success_rate,
                e.mean_return,
                e.mean_steps,
                e.invalid_action_rate,
                e.episodes,
                e.created_at,
            ],
        )
        return e

    def evaluations(self, experiment: str) -> list[EvaluationRecord]:
        """An experiment's evaluations, ordered by round."""
        rows = self.fetchall(
            f"SELECT {_EVALUATION_COLUMNS} FROM evaluations WHERE experiment = ? ORDER BY round", [experiment]
        )
        return [EvaluationRecord(*r) for r in rows]

    # --- walking and auditing lineage ----------------------------------------------------------------

    def parents(self, content_hash: str) -> list[tuple[str, str]]:
        """Direct parents of ``content_hash`` as (parent_hash, relation), sorted by parent hash."""
        rows = self.fetchall(
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

        edges, rows = self.transaction(work)
        by_hash: dict[str, list[ArtifactRecord]] = {}
        for record in (_artifact_from_row(r, self.data_root) for r in rows):
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
        """Re-hash every artifact of ``experiment``, check its edges both ways; return what disagrees.

        Files: "missing" (the recorded path is gone; only local paths can be checked) and "changed" (it
        hashes differently than recorded). Edges, for the hashes of the experiment's artifacts:
        "edge_missing" (a declared parent has no edge: a deleted edge), "edge_extra" (an edge that no row
        of that hash declares), "dangling" (an edge's parent hash is carried by no artifact: register roots
        such as the initial policy). "orphan_edge": an edge whose child hash no artifact carries, whose
        parent is one of the experiment's artifacts or is unrecorded too (a deleted row, an edited hash).
        Temp files of dead writers belong to the data root, not to the catalog: ``orphans.orphan_problems``.
        With ``objects``, an artifact published there is checked there too ("object_missing",
        "object_changed": its whole bytes re-hashed); its local copy is then a cache, checked when present.
        "consumed": an artifact that declares as its parent one of those missing or changed artifacts (by its
        recorded hash), so every round that consumed an input that cannot be verified is named.
        """
        records = self.artifacts(experiment)
        problems = [p for record in records for p in self._copy_problems(record)]
        return problems + consumer_problems(records, problems) + self.edge_problems(experiment)

    def edge_problems(self, experiment: str) -> list[Problem]:
        """The edge checks of `verify` alone (catalog queries, no file is read)."""
        problems: list[Problem] = []
        found = self.transaction(
            lambda con: {
                kind: con.execute(sql, [experiment]).fetchall() for kind, sql in _EDGE_CHECKS.items()
            }
        )
        for kind, rows in found.items():
            for stored, exp, round_, art_kind, variant, child, parent, relation in rows:
                path = "" if stored is None else resolved_path(stored, self.data_root)
                where = _describe(exp, round_, art_kind, variant) if exp is not None else None
                detail = _EDGE_DETAILS[kind].format(
                    where=where, child=child[:12], parent=parent[:12], relation=relation
                )
                if kind == "orphan_edge":
                    detail += f"; its parent is {where}" if where else "; its parent is unrecorded too"
                    problems.append(Problem("orphan_edge", path, child, None, detail))
                else:
                    problems.append(Problem(kind, path, parent, None, detail))
        return problems


# The experiment's artifacts with their declared parents, one row per (artifact, parent).
_DECLARED = """
    SELECT path, experiment, round, kind, variant, content_hash AS child_hash,
           unnest(from_json(parents_json, '[["VARCHAR"]]')) AS pair
    FROM artifacts
"""
# For each edge check: rows of (path, experiment, round, kind, variant, child_hash, parent_hash, relation)
# naming the artifact the problem is about (for "orphan_edge", the parent; NULLs if it is unrecorded).
_EDGE_CHECKS: dict[ProblemKind, str] = {
    "edge_missing": f"""
        SELECT d.path, d.experiment, d.round, d.kind, d.variant, d.child_hash, d.pair[1], d.pair[2]
        FROM ({_DECLARED} WHERE experiment = ?) d
        WHERE NOT EXISTS (SELECT 1 FROM lineage l WHERE l.child_hash = d.child_hash
                          AND l.parent_hash = d.pair[1] AND l.relation = d.pair[2])
        ORDER BY d.round, d.kind, d.variant, d.pair[1]
    """,
    "edge_extra": f"""
        SELECT a.path, a.experiment, a.round, a.kind, a.variant, l.child_hash, l.parent_hash, l.relation
        FROM lineage l JOIN artifacts a ON a.content_hash = l.child_hash
        WHERE a.experiment = ? AND NOT EXISTS (SELECT 1 FROM ({_DECLARED}) d WHERE d.child_hash = l.child_hash
                                               AND d.pair[1] = l.parent_hash AND d.pair[2] = l.relation)
        ORDER BY a.round, a.kind, a.variant, l.parent_hash
    """,
    "dangling": """
        SELECT a.path, a.experiment, a.round, a.kind, a.variant, l.child_hash, l.parent_hash, l.relation
        FROM lineage l JOIN artifacts a ON a.content_hash = l.child_hash
        WHERE a.experiment = ? AND l.parent_hash NOT IN (SELECT content_hash FROM artifacts)
        ORDER BY a.round, a.kind, a.variant, l.parent_hash
    """,
    "orphan_edge": """
        SELECT a.path, a.experiment, a.round, a.kind, a.variant, l.child_hash, l.parent_hash, l.relation
        FROM lineage l LEFT JOIN artifacts a ON a.content_hash = l.parent_hash AND a.experiment = ?
        WHERE l.child_hash NOT IN (SELECT content_hash FROM artifacts)
          AND (a.path IS NOT NULL OR l.parent_hash NOT IN (SELECT content_hash FROM artifacts))
        QUALIFY row_number() OVER (PARTITION BY l.child_hash, l.parent_hash
                                   ORDER BY a.round, a.kind, a.variant) = 1
        ORDER BY l.child_hash, l.parent_hash
    """,
}
_EDGE_DETAILS = {
    "edge_missing": (
        "{where} ({child}) declares parent {parent} ({relation}), but that lineage edge is missing"
    ),
    "edge_extra": (
        "{where} ({child}) has a lineage edge to {parent} ({relation}) that no artifact of its hash declares"
    ),
    "dangling": "{where} ({child}) is {relation} {parent}, which no artifact carries",
    "orphan_edge": "lineage edge {child} {relation} {parent}: no artifact carries the child {child}",
}


UNVERIFIABLE = ("missing", "changed", "object_missing", "object_changed")
"""File problems after which the recorded hash no longer vouches for any bytes one can read."""


def consumer_problems(records: Sequence[ArtifactRecord], problems: Sequence[Problem]) -> list[Problem]:
    """A "consumed" problem for each of `records` whose declared parent is the recorded hash of an artifact
    with an `UNVERIFIABLE` problem: the round it belongs to was made from an input that can no longer be
    checked."""
    bad = {p.expected_hash: p for p in problems if p.kind in UNVERIFIABLE}
    names = {r.content_hash: _describe(r.experiment, r.round, r.kind, r.variant) for r in records}
    found = []
    for record in records:
        for parent, relation in record.parents:
            if (problem := bad.get(parent)) is not None:
                where = _describe(record.experiment, record.round, record.kind, record.variant)
                detail = (
                    f"{where} ({record.content_hash[:12]}) is {relation} {names.get(parent, 'an artifact')} "
                    f"({parent[:12]}), which is {problem.kind.replace('_', ' ')}: round {record.round} "
                    "consumed an input that no longer matches its record"
                )
                found.append(Problem("consumed", record.path, parent, problem.actual_hash, detail))
    return found


FINGERPRINT = "on_disk"
"""Meta key of an artifact's `files.stat_fingerprint`, taken by its writer when it hashed the bytes."""
FINGERPRINT_OF = "on_disk_of"
"""Meta key of the content hash the `FINGERPRINT` was taken with: the fingerprint vouches for that hash only,
so a record whose hash was edited behind the store's back (or re-recorded with stale meta) is re-hashed, not
trusted."""
MANIFEST = "file_hashes"
"""Meta key of a folder artifact's `files.directory_manifest` (per-file sha256), taken when it was hashed."""


def hashed_folder(folder: str | Path) -> tuple[str, dict]:
    """(content hash, meta) of a folder just written: its one full hash, with the per-file hashes (`MANIFEST`)
    and, if no file changed while it was read, the stat fingerprint that lets readers trust it
    (`FINGERPRINT`)."""
    before = stat_fingerprint(folder)
    manifest = directory_manifest(folder)
    content_hash = manifest_hash(manifest)
    trusted = (
        {FINGERPRINT: before, FINGERPRINT_OF: content_hash} if stat_fingerprint(folder) == before else {}
    )
    return content_hash, {MANIFEST: manifest, **trusted}


def check_object(objects: ObjectStore, record: ArtifactRecord) -> Problem | None:
    """An "object_missing" or "object_changed" problem if the record's published object no longer holds its
    content."""
    uri = record.meta["object"]
    actual = objects.content_hash(uri)
    if actual == record.content_hash:
        return None
    where = _describe(record.experiment, record.round, record.kind, record.variant)
    if actual is None:
        detail = f"{where} ({record.content_hash[:12]}): object {uri} does not exist"
        return Problem("object_missing", uri, record.content_hash, None, detail)
    detail = f"{where}: object {uri} hashes to {actual[:12]}, recorded {record.content_hash[:12]}"
    return Problem("object_changed", uri, record.content_hash, actual, detail)


def check_on_disk(record: ArtifactRecord, quick: bool = False) -> Problem | None:
    """A "missing" or "changed" problem if the recorded path no longer holds the recorded content.

    The one place that checks an artifact against the disk. Full (the default: ``verify``, the audit, the
    blocking checks on tables): the bytes are re-hashed. ``quick`` (readers inside a round, the parent
    checkpoint's check): an artifact whose files still have the fingerprint its writer recorded (size, mtime,
    inode, ctime: `files.stat_fingerprint`), taken with the hash the record now holds (`FINGERPRINT_OF`), is
    trusted without reading its bytes; any other is re-hashed (an edited recorded hash included). A folder
    recorded with its manifest names the files that changed.
    """
    where = _describe(record.experiment, record.round, record.kind, record.variant)
    if not os.path.exists(record.path):
        detail = f"{where} ({record.content_hash[:12]}): {record.path} does not exist"
        return Problem("missing", record.path, record.content_hash, None, detail)
    if quick and _fingerprint_vouches(record):
        return None
    manifest = record.meta.get(MANIFEST) if isinstance(record.meta.get(MANIFEST), dict) else None
    now = directory_manifest(record.path) if manifest and os.path.isdir(record.path) else None
    actual = manifest_hash(now) if now is not None else hash_path(record.path)
    if actual != record.content_hash:
        changed = (
            sorted(set(now) ^ set(manifest) | {f for f in now if manifest.get(f, now[f]) != now[f]})
            if now is not None and manifest is not None
            else []
        )
        which = f" ({', '.join(changed[:5])}{' …' if len(changed) > 5 else ''})" if changed else ""
        detail = (
            f"{where}: {record.path} changed{which} (recorded {record.content_hash[:12]}, now {actual[:12]})"
        )
        return Problem("changed", record.path, record.content_hash, actual, detail)
    return None


def _fingerprint_vouches(record: ArtifactRecord) -> bool:
    """True when the record's files still have the fingerprint its writer took, with the very hash it
    records."""
    return (
        record.meta.get(FINGERPRINT) is not None
        and record.meta.get(FINGERPRINT_OF) == record.content_hash
        and record.meta[FINGERPRINT] == stat_fingerprint(record.path)
    )


def _describe(experiment: str, round_: int, kind: str, variant: str) -> str:
    return f"{experiment}/{round_}/{kind}" + (f"[{variant}]" if variant else "")
