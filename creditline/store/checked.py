"""What `creditline verify` checks of one experiment, counted for its summary.

"0 problem(s)" alone does not say whether anything was looked at: a mistyped data root or an experiment with
no rounds also has none. The summary names the scope of each check: the artifacts re-hashed (files and
folders), the rounds and their commit points, the lineage edges compared with the declared parents, the MLflow
runs asked for their status, and, with object storage, the published objects re-hashed there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from creditline.store.lineage import MANIFEST, LineageStore
from creditline.store.rounds import round_commits, tracking_runs


@dataclass(frozen=True)
class Checked:
    experiment: str
    files: int
    """Artifacts that are one file (tables, summaries), each re-hashed."""
    folders: int
    """Artifacts that are a folder (checkpoints, sources), each re-hashed file by file."""
    rounds: int
    """Rounds (1 and up) with at least one artifact."""
    commits: int
    """Of those, rounds with a commit point, checked against what is recorded."""
    edges: int
    """Lineage edges from the experiment's artifacts to their parents."""
    runs: int
    """MLflow runs recorded for the experiment (its parent run included), each asked for its status."""
    objects: int | None
    """Artifacts published to object storage, re-hashed there; None without object storage."""

    def line(self) -> str:
        objects = "" if self.objects is None else f", {self.objects} objects in object storage"
        artifacts = (
            f"{self.files + self.folders} artifacts re-hashed ({self.files} files, {self.folders} folders)"
        )
        return (
            f"checked {self.experiment!r}: {artifacts}, {self.commits} of {self.rounds} rounds committed, "
            f"{self.edges} lineage edges, {self.runs} MLflow runs{objects}"
        )


def checked(store: LineageStore, experiment: str) -> Checked:
    """What `verify` covers of `experiment` (catalog queries and a stat per artifact; no file is read)."""
    records = store.artifacts(experiment)
    folders = sum(1 for r in records if MANIFEST in r.meta or os.path.isdir(r.path))
    edges = store.fetchone(
        "SELECT count(*) FROM lineage WHERE child_hash IN "
        "(SELECT content_hash FROM artifacts WHERE experiment = ?)",
        [experiment],
    )
    return Checked(
        experiment=experiment,
        files=len(records) - folders,
        folders=folders,
        rounds=len({r.round for r in records if r.round >= 1}),
        commits=len(round_commits(store, experiment)),
        edges=edges[0] if edges else 0,
        runs=len(tracking_runs(store, experiment)),
        objects=None if store.objects is None else sum(1 for r in records if "object" in r.meta),
    )
