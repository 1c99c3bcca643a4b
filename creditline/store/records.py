"""Typed records that the store writes and reads.

Every row that crosses the storage boundary is one of these frozen dataclasses, so callers (assets, the
CLI, tests) never handle raw tuples or column positions. Timestamps are naive datetimes in UTC: DuckDB's
plain ``TIMESTAMP`` round-trips them without a time-zone database, and one clock (UTC) is all a lineage
audit needs. ``created_at`` is filled in by the store when a record is written; callers leave it ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

ProblemKind = Literal[
    "missing",
    "changed",
    "dangling",
    "edge_missing",
    "edge_extra",
    "orphan_edge",
    "orphan",
    "incomplete",
    "uncommitted",
    "tracking",
    "object_missing",
    "object_changed",
    "consumed",
    "dead_run",
    "held_slot",
    "stale_lease",
]
"""What ``LineageStore.verify`` found (see ``Problem.kind``)."""


@dataclass(frozen=True)
class FileRecord:
    """A file just written atomically: what an asset needs to register it in the lineage store."""

    path: str
    """Absolute path of the file."""
    content_hash: str
    """sha256 hex of the file's bytes."""
    rows: int
    """Number of table rows in the file."""
    bytes: int
    """Size of the file on disk."""
    fingerprint: dict[str, list[int]] | None = None
    """`files.stat_fingerprint` of the file that landed, taken by the writer (None: someone replaced it at
    once)."""


@dataclass(frozen=True)
class ArtifactRecord:
    """One persisted output of one round: a table, a checkpoint folder, an evaluation summary.

    The key is (experiment, round, kind, variant): re-recording the same key replaces the row, so a re-run
    step never duplicates it. ``variant`` separates outputs that coexist for one round and kind, e.g. the
    rubric version of a re-scored table, or ``"rubric=abc;estimator=gigpo;params=123"`` for advantages.
    """

    experiment: str
    round: int
    kind: str
    """What the artifact is: "episodes", "steps", "scores", "advantages", "checkpoint", "evaluation", ..."""
    path: str
    """Where it lives: an absolute path or a URI. The catalog keeps a path under the data root relative to it
    and hands it back resolved against the data root it was opened with (`creditline.store.root_paths`)."""
    content_hash: str
    """sha256 hex of the file, or ``files.hash_directory`` of a folder: the artifact's identity in lineage."""
    variant: str = ""
    rows: int | None = None
    """Row count for tables; ``None`` for folders such as checkpoints."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Small JSON-serialisable facts worth querying later (reward mean, rubric version, ...)."""
    dagster_run_id: str | None = None
    created_at: datetime | None = None
    parents: tuple[tuple[str, str], ...] = ()
    """The (parent_hash, relation) pairs it was recorded with, sorted; filled in by the store, which keeps
    them beside the ``lineage`` edges so that ``verify`` can tell a deleted or added edge."""


@dataclass(frozen=True)
class RunRecord:
    """One orchestrator run of one asset: joins Dagster, MLflow and the code that produced an artifact."""

    dagster_run_id: str
    experiment: str
    round: int
    asset: str
    mlflow_run_id: str | None = None
    code_version: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    """The run's resolved configuration (JSON-serialisable)."""
    created_at: datetime | None = None


@dataclass(frozen=True)
class EvaluationRecord:
    """The headline metrics of one round's policy; one row per (experiment, round)."""

    experiment: str
    round: int
    policy_hash: str
    """Content hash of the evaluated checkpoint."""
    success_rate: float
    mean_return: float
    mean_steps: float
    invalid_action_rate: float
    episodes: int
    """How many evaluation episodes the metrics average over."""
    created_at: datetime | None = None


@dataclass(frozen=True)
class LineageNode:
    """One ancestor (or the start itself, at depth 0) found by walking lineage edges towards the roots."""

    content_hash: str
    depth: int
    """Fewest edges from the starting artifact to this one."""
    relation: str
    """How ``child_hash`` was derived from this node ("generated_from", ...); "" for the start."""
    child_hash: str | None
    """The node one step closer to the start along a shortest path; ``None`` for the start."""
    artifacts: tuple[ArtifactRecord, ...] = ()
    """Artifact rows carrying this hash; empty when the hash is unknown (a dangling parent)."""


@dataclass(frozen=True)
class Problem:
    """One finding of ``LineageStore.verify``: the catalog and the disk (or the edges) disagree."""

    kind: ProblemKind
    """"missing": the path is gone; "changed": it hashes differently than recorded;
    "dangling": an edge's parent hash is carried by no artifact; "edge_missing": an artifact's declared
    parent has no edge (a deleted edge); "edge_extra": an edge that no artifact with the child's hash
    declares (an added edge); "orphan_edge": an edge whose child hash no artifact carries (its row was
    deleted or its hash edited); "orphan": a temp file or folder left by a writer that died;
    "object_missing" / "object_changed": the artifact's published object (`meta["object"]`) is gone, or its
    bytes hash differently than recorded; "consumed": the artifact declares as its parent an artifact that is
    missing or changed (``expected_hash``: that parent's recorded hash); "dead_run": a Dagster run still in
    flight whose process is gone; "held_slot": a pool slot claimed by a run that is dead or over;
    "stale_lease": an experiment's lease whose holder is gone (the last three: what the next `creditline run`,
    `rescore` or `register` cleans up, `pipelines.reaper`)."""
    path: str
    """The artifact's path; for the edge kinds the child's path ("orphan_edge": the parent's, or "" if
    unknown); for "orphan", the temp file or folder."""
    expected_hash: str
    """The recorded hash; for the edge kinds the parent hash ("orphan_edge": the unknown child hash);
    "" for "orphan"."""
    actual_hash: str | None
    """What the path hashes to now; ``None`` when missing or not applicable."""
    detail: str
    """One line naming experiment/round/kind[variant] (or the temp path) and the hash prefixes involved."""
