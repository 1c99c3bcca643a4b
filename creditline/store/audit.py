"""The lineage audit: everything behind a round's checkpoint, back to the initial policy.

Walks the lineage edges from the checkpoint towards the roots and lists every ancestor by round:
the checkpoint, the advantages (estimator and parameters) and scores (rubric version) it was
trained on, the rollouts, the parent checkpoint, ... down to round 0. Each round's re-scored versions
(other rubric versions, never trained on) are listed beside it. Each artifact is re-hashed,
so the report says whether the file on disk is still the one recorded; the Dagster and MLflow run
ids that produced it are listed beside it.

Nothing the walk meets is dropped. A hash in the chain that no artifact row carries (the row was deleted,
or its hash edited) is listed as "unrecorded", in the round of the artifact that points at it. A row of a
chain round whose kind the chain passes through, but whose hash the chain does not reach, is listed as
"not in chain" (the chain points at a different version of it). Either makes ``all_match`` false.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast

from creditline.store import (
    INITIAL_POLICY_VARIANT,
    ArtifactRecord,
    LineageNode,
    LineageStore,
    Problem,
    check_on_disk,
)
from creditline.store.lineage import UNVERIFIABLE, consumer_problems
from creditline.store.records import ProblemKind
from creditline.store.rounds import tracking_runs

KIND_ORDER = [
    "checkpoint",
    "training",
    "advantages",
    "model_rewards",
    "reward_model",
    "scores",
    "steps",
    "episodes",
    "evaluation",
    "rescore_scores",
    "rescore_advantages",
    "rescore_comparison",
]
CHAIN_KINDS = frozenset(
    {"checkpoint", "advantages", "model_rewards", "reward_model", "scores", "steps", "episodes"}
)
"""The kinds a checkpoint's lineage passes through in each round (training and evaluation are its
children, re-scored tables a side branch)."""
RESCORED = "rescored (not trained on)"
NOT_IN_CHAIN = "not in chain"
UNRECORDED = "unrecorded"
NO_RECORD = "no record"


@dataclass(frozen=True)
class AuditEntry:
    round: int
    """For an unrecorded hash, the round of the artifact that points at it."""
    kind: str
    """The artifact's kind, or "unrecorded" for a hash in the chain that no artifact row carries."""
    variant: str
    content_hash: str
    path: str
    """"" when unrecorded."""
    on_disk: str
    """"ok", "changed", "missing", or "no record" (unrecorded)."""
    relation: str
    """How the artifact one step closer to the audited checkpoint was derived from this one; "audited"
    for the checkpoint itself, "rescored (not trained on)" or "not in chain" for rows beside the chain."""
    detail: dict
    dagster_run_id: str | None
    mlflow_run_id: str | None
    experiment: str
    """The artifact row's experiment: the audited one, unless only another experiment records the hash."""
    parents: tuple[tuple[str, str], ...] = ()
    """(parent_hash, relation) pairs the artifact was recorded with: how this one was derived (empty when
    unrecorded)."""

    @property
    def matches(self) -> bool:
        return self.on_disk == "ok" and self.relation != NOT_IN_CHAIN

    @property
    def name(self) -> str:
        return self.kind + (f"[{self.variant}]" if self.variant else "")

    def mismatch(self) -> str:
        """Why this entry spoils ``all_match`` (one line), or "" if it does not."""
        where = f"round {self.round} {self.name} {self.content_hash[:12]}"
        if self.on_disk == NO_RECORD:
            return (
                f"{where}: in the chain ({self.relation} of {self.detail.get('reached_from', '?')}) "
                "but no artifact row carries this hash (row deleted or its hash edited)"
            )
        if self.relation == NOT_IN_CHAIN:
            disk = "" if self.on_disk == "ok" else f", and its file is {self.on_disk}"
            return (
                f"{where}: recorded, but the chain points at another {self.kind} of round {self.round}{disk}"
            )
        return "" if self.on_disk == "ok" else f"{where}: file {self.on_disk} ({self.path})"


@dataclass(frozen=True)
class LineageReport:
    experiment: str
    round: int
    checkpoint_hash: str
    entries: list[AuditEntry]
    problems: tuple[str, ...] = ()
    """What `verify` finds about the listed artifacts beyond their files (lineage edges deleted or added,
    rounds that consumed a changed input), one line each: each spoils ``all_match`` too."""

    @property
    def all_match(self) -> bool:
        return all(e.matches for e in self.entries) and not self.problems

    @property
    def mismatches(self) -> list[str]:
        """One line per entry that spoils ``all_match``, then one per other problem."""
        return [e.mismatch() for e in self.entries if not e.matches] + list(self.problems)

    def as_dict(self) -> dict:
        return {
            "experiment": self.experiment,
            "round": self.round,
            "checkpoint": self.checkpoint_hash,
            "all_match": self.all_match,
            "mismatches": self.mismatches,
            "artifacts": [asdict(e) for e in self.entries],
        }

    def as_text(self, wide: bool = False) -> str:
        """One line per artifact, at most `WIDTH` columns; `wide`: every detail, a few lines each."""
        names = _names(self.entries)
        if wide:
            lines = [
                f"lineage of {self.experiment} round {self.round} checkpoint {self.checkpoint_hash[:12]}"
            ]
            current = None
            for e in self.entries:
                if e.round != current:
                    current = e.round
                    lines.append(f"round {e.round}" + ("  (initial policy)" if e.round == 0 else ""))
                lines += _wide_lines(e, names, self.experiment)
        else:
            lines = [
                f"lineage of {self.experiment} round {self.round} checkpoint {self.checkpoint_hash[:12]}: "
                f"{len(self.entries)} artifacts"
            ]
            lines += _compact_lines(self.entries, names)
        if self.all_match:
            lines.append("all files match their recorded hashes")
        else:
            lines.append(f"LINEAGE DOES NOT MATCH ({len(self.mismatches)}):")
            for mismatch in self.mismatches:
                lines += [f"  {mismatch}"] if wide else _wrapped(mismatch)
        return "\n".join(lines)


WIDTH = 100
"""The compact view's widest line."""


def _names(entries: list[AuditEntry]) -> dict[str, tuple[int, str]]:
    """{content hash: (round, kind)} of the listed artifacts, to name a parent by what it is."""
    return {e.content_hash: (e.round, e.kind) for e in reversed(entries) if e.kind != UNRECORDED}


def derivation(entry: AuditEntry, names: dict[str, tuple[int, str]], hashes: bool = False) -> str:
    """How `entry` was derived, said beside it: its parents grouped by relation ("initialized_from r1
    checkpoint; trained_on advantages, steps"), a parent of another round named with its round, one that is
    not listed by its hash; `hashes`: every parent's hash too."""
    if entry.kind == UNRECORDED:
        return f"no artifact row carries this hash ({entry.relation} of {entry.detail.get('reached_from')})"
    by_relation: dict[str, list[str]] = {}
    for parent, relation in entry.parents:
        round_, kind = names.get(parent, (entry.round, ""))
        name = (kind if round_ == entry.round else f"r{round_} {kind}") if kind else parent[:12]
        by_relation.setdefault(relation, []).append(f"{name} {parent[:12]}" if hashes and kind else name)
    text = "; ".join(f"{rel} {', '.join(sorted(parents))}" for rel, parents in sorted(by_relation.items()))
    if not entry.parents:
        text = "(initial policy)" if entry.variant == INITIAL_POLICY_VARIANT else "(no parents)"
    elif entry.variant and entry.variant != INITIAL_POLICY_VARIANT:
        text = f"[{entry.variant}] {text}"
    if entry.relation == NOT_IN_CHAIN:
        return f"NOT IN CHAIN: {text}"
    return f"{RESCORED}: {text}" if entry.relation == RESCORED else text


def _compact_lines(entries: list[AuditEntry], names: dict[str, tuple[int, str]]) -> list[str]:
    rows = [
        (f"r{e.round}", e.kind, e.content_hash[:12], e.on_disk.upper() if e.on_disk != "ok" else "ok")
        for e in entries
    ]
    widths = [
        max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(("rnd", "kind", "hash", "disk"))
    ]

    def line(cells: tuple[str, ...], last: str) -> str:
        text = "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "  " + last
        return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"

    header = line(("rnd", "kind", "hash", "disk"), "derived from")
    return [header] + [line(row, derivation(e, names)) for row, e in zip(rows, entries, strict=True)]


def _wide_lines(e: AuditEntry, names: dict[str, tuple[int, str]], experiment: str) -> list[str]:
    detail = " ".join(f"{k}={v}" for k, v in e.detail.items() if k != "reached_from")
    detail += f" experiment={e.experiment}" if e.experiment != experiment else ""
    runs = f" dagster={e.dagster_run_id[:8]}" if e.dagster_run_id else ""
    runs += f" mlflow={e.mlflow_run_id[:8]}" if e.mlflow_run_id else ""
    role = f"  ({e.relation})" if e.relation in ("audited", RESCORED, NOT_IN_CHAIN) else ""
    return [
        f"  {e.name:<20} {e.content_hash[:12]}  {e.on_disk}{role}",
        f"      from: {derivation(e, names, hashes=True)}",
        *([f"      {(detail + runs).strip()}"] if (detail + runs).strip() else []),
        f"      {e.path or '(no artifact row carries this hash)'}",
    ]


def _wrapped(mismatch: str) -> list[str]:
    return textwrap.wrap(
        mismatch, WIDTH, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
    )


def _detail(kind: str, meta: dict) -> dict:
    keys = {
        "advantages": ["estimator", "params", "params_hash"],
        "scores": ["rubric_version"],
        "rescore_scores": ["rubric_version"],
        "rescore_advantages": ["rubric_version", "estimator", "params_hash"],
        "rescore_comparison": ["reward_correlation", "advantage_rank_correlation", "sign_flip_share"],
        "checkpoint": ["source", "estimator", "params_hash", "rubric_version"],
        "steps": ["parent_checkpoint", "imported", "branch_points", "continuations"],
        "source": ["format", "files", "verifiers"],
        "evaluation": ["success_rate"],
        "reward_model": ["kind"],
        "model_rewards": ["kind"],
    }.get(kind, [])
    return {k: (meta[k][:12] if k == "parent_checkpoint" else meta[k]) for k in keys if k in meta}


def lineage_report(store: LineageStore, experiment: str, round_: int | None = None) -> LineageReport | None:
    """The audit of round `round_`'s checkpoint (default: the newest round that has one)."""
    if round_ is None:
        round_ = store.latest_round(experiment, kind="checkpoint")
    record = store.artifact(experiment, round_, "checkpoint") if round_ is not None else None
    if record is None:
        return None
    assert round_ is not None  # a record was found for it
    # A round has one MLflow run (created once, recorded in `tracking_runs`), whichever attempt wrote an
    # artifact: a stage reused after a kill keeps the killed attempt's Dagster run id.
    by_round = {r: run_id for r, run_id in tracking_runs(store, experiment).items() if r >= 1}
    by_run: dict[tuple[str | None, int], str | None] = {
        (r.dagster_run_id, r.round): r.mlflow_run_id for r in store.runs(experiment)
    }

    def entry(artifact: ArtifactRecord, relation: str) -> AuditEntry:
        return AuditEntry(
            round=artifact.round,
            kind=artifact.kind,
            variant=artifact.variant,
            content_hash=artifact.content_hash,
            path=artifact.path,
            on_disk=problem.kind if (problem := check_on_disk(artifact)) else "ok",
            relation=relation,
            detail=_detail(artifact.kind, dict(artifact.meta)),
            dagster_run_id=artifact.dagster_run_id,
            mlflow_run_id=by_round.get(artifact.round)
            or by_run.get((artifact.dagster_run_id, artifact.round)),
            experiment=artifact.experiment,
            parents=artifact.parents,
        )

    chain = store.lineage_chain(record.content_hash)
    entries = _chain_entries(chain, experiment, entry)
    in_chain = {node.content_hash for node in chain}
    reached = {(e.round, e.kind) for e in entries if e.kind != UNRECORDED and e.experiment == experiment}
    for round_in_chain in sorted({r for r, _ in reached}):  # what else each round holds, beside the chain
        for a in store.artifacts(experiment, round_in_chain):
            if a.kind.startswith("rescore_"):
                entries.append(entry(a, RESCORED))
            elif (
                a.kind in CHAIN_KINDS and a.content_hash not in in_chain and (a.round, a.kind) not in reached
            ):
                entries.append(entry(a, NOT_IN_CHAIN))
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    entries.sort(key=lambda e: (-e.round, rank.get(e.kind, len(rank)), e.variant))
    return LineageReport(
        experiment, round_, record.content_hash, entries, _catalog_problems(store, experiment, entries)
    )


def _catalog_problems(store: LineageStore, experiment: str, entries: list[AuditEntry]) -> tuple[str, ...]:
    """The problems `verify` reports about the listed artifacts that their own entries do not show: edges (by
    the child's path, or the parent's hash) and consumers of a missing or changed artifact (files are not
    re-read)."""
    paths = {e.path for e in entries if e.path}
    hashes = {e.content_hash for e in entries}
    unverifiable = [  # an `on_disk` in UNVERIFIABLE is a problem kind
        Problem(cast(ProblemKind, e.on_disk), e.path, e.content_hash, None, "")
        for e in entries
        if e.on_disk in UNVERIFIABLE
    ]
    found = consumer_problems(store.artifacts(experiment), unverifiable) + store.edge_problems(experiment)
    return tuple(f"{p.kind}: {p.detail}" for p in found if p.path in paths or p.expected_hash in hashes)


def _chain_entries(
    chain: list[LineageNode], experiment: str, entry: Callable[[ArtifactRecord, str], AuditEntry]
) -> list[AuditEntry]:
    """One entry per artifact row of each chain node (the experiment's rows, else any experiment's), and
    an "unrecorded" entry for a node that no row carries, placed in the round of the node pointing at it."""
    entries: list[AuditEntry] = []
    round_of: dict[str, int] = {}
    for node in chain:  # breadth-first: a node's child comes before it
        own = [a for a in node.artifacts if a.experiment == experiment]
        rows = own or list(node.artifacts)
        entries += [entry(a, node.relation or "audited") for a in rows]
        if rows:
            round_of[node.content_hash] = min(a.round for a in rows)
            continue
        round_ = round_of.get(node.child_hash or "", 0)
        round_of[node.content_hash] = round_
        entries.append(
            AuditEntry(
                round=round_,
                kind=UNRECORDED,
                variant="",
                content_hash=node.content_hash,
                path="",
                on_disk=NO_RECORD,
                relation=node.relation,
                detail={"reached_from": (node.child_hash or "")[:12]},
                dagster_run_id=None,
                mlflow_run_id=None,
                experiment=experiment,
            )
        )
    return entries
