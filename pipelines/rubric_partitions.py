"""Keep the re-score branch's `rubric_versions` partitions in step with the code and the lineage store.

The rubric dimension of the re-score partitions is dynamic, so that a rubric version stays a partition
(and what was scored with it stays visible in the UI) after an edit to `creditline/credit/rubrics.py` (or
to a plugin's rubric) replaces it in code. Its keys are the union of the versions of the rubrics that load
now (the built-ins and every registered plugin's: `creditline.credit.rubric_registry`) and every version
the lineage store has recorded (the round's `scores` and `rescored_scores` record the version they scored
with, `creditline rescore --rubric` the one it was given, and this the code's). Dagster cannot compute
that union by itself: the CLI (`creditline run`, `rescore`, `register`) and the round sensor call
`sync_rubric_partitions` before they launch runs. Partitions are only ever added, never deleted.
"""

from __future__ import annotations

import dagster as dg

from assets.partitions import RUBRIC_VERSIONS
from creditline.credit.rubric_registry import loadable_rubrics
from creditline.store import LineageStore, record_rubrics, rubric_versions


def sync_rubric_partitions(instance: dg.DagsterInstance, store: LineageStore) -> list[str]:
    """Record the code's rubric versions in `store`, add every recorded version missing from `instance`.

    Idempotent; returns the partition keys it added, sorted (empty when nothing was missing).
    """
    record_rubrics(store, loadable_rubrics())
    recorded = {r.version for r in rubric_versions(store)}
    missing = sorted(recorded - set(RUBRIC_VERSIONS.get_partition_keys(dynamic_partitions_store=instance)))
    if missing:
        instance.add_dynamic_partitions(RUBRIC_VERSIONS.name, missing)
    return missing
