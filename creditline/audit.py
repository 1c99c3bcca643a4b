"""The lineage audit: everything behind a round's checkpoint, back to the initial policy.

Walks the lineage edges from the checkpoint towards the roots and lists every ancestor by round:
the checkpoint, the advantages (estimator and parameters) and scores (rubric version) it was
trained on, the rollouts, the parent checkpoint, ... down to round 0. Each round's re-scored versions
(other rubric versions, never trained on) are listed beside it. Each artifact is re-hashed,
so the report says whether the file on disk is still the one recorded; the Dagster and MLflow run
ids that produced it are listed beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from creditline.store import LineageStore, check_on_disk

KIND_ORDER = [
    "checkpoint",
    "training",
    "advantages",
    "scores",
    "steps",
    "episodes",
    "evaluation",
    "rescore_scores",
    "rescore_advantages",
    "rescore_comparison",
]
RESCORED = "rescored (not trained on)"


@dataclass(frozen=True)
class AuditEntry:
    round: int
    kind: str
    variant: str
    content_hash: str
    path: str
    on_disk: str
    """"ok", "changed" or "missing"."""
    relation: str
    """How the artifact one step closer to the audited checkpoint was derived from this one."""
    detail: dict
    dagster_run_id: str | None
    mlflow_run_id: str | None


@dataclass(frozen=True)
class LineageReport:
    experiment: str
    round: int
    checkpoint_hash: str
    entries: list[AuditEntry]

    @property
    def all_match(self) -> bool:
        return all(e.on_disk == "ok" for e in self.entries)

    def as_dict(self) -> dict:
        return {"experiment": self.experiment, "round": self.round, "checkpoint": self.checkpoint_hash,
                "all_match": self.all_match, "artifacts": [asdict(e) for e in self.entries]}  # fmt: skip

    def as_text(self) -> str:
        lines = [f"lineage of {self.experiment} round {self.round} checkpoint {self.checkpoint_hash[:12]}"]
        current = None
        for e in self.entries:
            if e.round != current:
                current = e.round
                lines.append(f"round {e.round}" + ("  (initial policy)" if e.round == 0 else ""))
            detail = " ".join(f"{k}={v}" for k, v in e.detail.items())
            runs = f" dagster={e.dagster_run_id[:8]}" if e.dagster_run_id else ""
            runs += f" mlflow={e.mlflow_run_id[:8]}" if e.mlflow_run_id else ""
            name = e.kind + (f"[{e.variant}]" if e.variant else "")
            lines.append(
                f"  {name:<20} {e.content_hash[:12]}  {e.on_disk:<7} {e.relation:<16} {detail}{runs}"
            )
            lines.append(f"  {'':<20} {e.path}")
        lines.append("all files match their recorded hashes" if self.all_match else "SOME FILES DO NOT MATCH")
        return "\n".join(lines)


def _detail(kind: str, meta: dict) -> dict:
    keys = {"advantages": ["estimator", "params", "params_hash"], "scores": ["rubric_version"],
            "rescore_scores": ["rubric_version"], "rescore_advantages": ["rubric_version", "estimator", "params_hash"],
            "rescore_comparison": ["reward_correlation", "advantage_rank_correlation", "sign_flip_share"],
            "checkpoint": ["source", "estimator", "params_hash", "rubric_version"], "steps": ["parent_checkpoint"],
            "evaluation": ["success_rate"]}.get(kind, [])  # fmt: skip
    return {k: (meta[k][:12] if k == "parent_checkpoint" else meta[k]) for k in keys if k in meta}


def lineage_report(store: LineageStore, experiment: str, round_: int | None = None) -> LineageReport | None:
    """The audit of round `round_`'s checkpoint (default: the newest round that has one)."""
    if round_ is None:
        round_ = store.latest_round(experiment, kind="checkpoint")
    record = store.artifact(experiment, round_, "checkpoint") if round_ is not None else None
    if record is None:
        return None
    mlflow_ids = {(r.dagster_run_id, r.round): r.mlflow_run_id for r in store.runs(experiment)}

    def entry(artifact, relation: str) -> AuditEntry:
        return AuditEntry(
            round=artifact.round, kind=artifact.kind, variant=artifact.variant, content_hash=artifact.content_hash,
            path=artifact.path, on_disk=problem.kind if (problem := check_on_disk(artifact)) else "ok", relation=relation,
            detail=_detail(artifact.kind, dict(artifact.meta)), dagster_run_id=artifact.dagster_run_id,
            mlflow_run_id=mlflow_ids.get((artifact.dagster_run_id, artifact.round)),
        )  # fmt: skip

    entries = [entry(artifact, node.relation or "audited") for node in store.lineage_chain(record.content_hash)
               for artifact in node.artifacts if artifact.experiment == experiment]  # fmt: skip
    for round_in_chain in sorted(
        {e.round for e in entries}
    ):  # every re-scored version of those rounds, beside them
        entries += [entry(a, RESCORED) for a in store.artifacts(experiment, round_in_chain)
                    if a.kind.startswith("rescore_")]  # fmt: skip
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    entries.sort(key=lambda e: (-e.round, rank.get(e.kind, len(rank)), e.variant))
    return LineageReport(experiment, round_, record.content_hash, entries)
