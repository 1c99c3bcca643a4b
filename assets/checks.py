"""Blocking asset checks on every round table, and on the round-to-round parent link.

The assets validate before writing, so a bad table never lands. These checks re-hash what was stored:
the file must still hash to the recorded content hash, which makes it the very bytes that passed the
table's schema before they were written (so the schema is not run twice). They are blocking, so a failing
check stops the round's downstream assets (no training on a bad table); the round's readers trust them
(`check_on_disk(quick=True)`).
"""

import dagster as dg

from assets.partitions import ROUNDS, parse_round_key
from creditline.lineage_chain import ParentCheckpointError, parent_record, verify_checkpoint
from creditline.store import check_on_disk
from resources import LineageResource


def _stored_table_check(table: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=table,
        name=f"{table}_stored_and_valid",
        blocking=True,
        partitions_def=ROUNDS,
        description=f"The stored {table} file still hashes to the recorded hash of the {table} table that "
        f"passed its schema before it was written.",
    )
    def check(context: dg.AssetCheckExecutionContext, lineage: LineageResource) -> dg.AssetCheckResult:
        experiment, round_ = parse_round_key(context.partition_key)
        record = lineage.store().artifact(experiment, round_, table)
        if record is None:
            return dg.AssetCheckResult(passed=False, metadata={"problem": "no artifact recorded"})
        if problem := check_on_disk(record):
            return dg.AssetCheckResult(passed=False, metadata={"problem": problem.detail})
        return dg.AssetCheckResult(
            passed=True, metadata={"rows": record.rows, "content_hash": record.content_hash}
        )

    return check


@dg.asset_check(
    asset="steps",
    blocking=True,
    partitions_def=ROUNDS,
    description="The parent checkpoint on disk is still the one these rollouts were generated from.",
)
def parent_checkpoint_unchanged(
    context: dg.AssetCheckExecutionContext, lineage: LineageResource
) -> dg.AssetCheckResult:
    experiment, round_ = parse_round_key(context.partition_key)
    store = lineage.store()
    with store.session():  # the lineage reads only
        steps = store.artifact(experiment, round_, "steps")
        try:
            parent = None if steps is None else parent_record(store, experiment, round_)
        except ParentCheckpointError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    if steps is None:
        return dg.AssetCheckResult(passed=False, metadata={"problem": "no steps recorded"})
    try:
        verify_checkpoint(parent)
    except ParentCheckpointError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    recorded = steps.meta.get("parent_checkpoint")
    problem = (
        {}
        if recorded == parent.content_hash
        else {
            "problem": f"the rollouts were recorded for parent {str(recorded)[:12]}, the parent on disk is "
            f"{parent.content_hash[:12]}"
        }
    )
    return dg.AssetCheckResult(
        passed=not problem,
        metadata={
            **problem,
            "recorded_parent": str(recorded),
            "current_parent": parent.content_hash,
            "parent_path": parent.path,
        },
    )


ROUND_CHECKS = [
    *[_stored_table_check(t) for t in ("episodes", "steps", "scores", "advantages", "evaluation")],
    parent_checkpoint_unchanged,
]
