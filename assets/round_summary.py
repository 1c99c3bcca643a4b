"""`round_summary`: the round's commit point, written last.

It runs after `evaluation` and its blocking check. It copies the round's metrics from the round's
MLflow run to the experiment's parent run with step = round (the learning curves), closes both runs
FINISHED, and then writes the commit row. Only a committed round counts as done for `creditline run`,
the round sensor and `verify`; a process killed at any earlier instant leaves the round uncommitted,
and running the round again completes it (each stage reuses what an earlier attempt recorded).
"""

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from creditline.faults import failpoint
from creditline.store import config_hash
from creditline.store.rounds import OPTIONAL_ROUND_KINDS, ROUND_KINDS, RoundCommit, record_round_commit
from resources import LineageResource, TrackerResource
from resources.tracker import SERIES_MARK

VERSION = code_version(__name__)


@dg.asset(
    partitions_def=ROUNDS,
    deps=["evaluation"],
    group_name="round",
    code_version=VERSION,
    description="The round's commit point: metrics on the experiment's learning curves, runs closed, "
    "the round recorded as done.",
)
def round_summary(context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource):
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    store = lineage.store()
    recorded = {a.kind: a for a in store.artifacts(experiment, round_) if a.variant == ""}  # one query
    records = {kind: recorded.get(kind) for kind in ROUND_KINDS}
    if missing := sorted(kind for kind, record in records.items() if record is None):
        raise ValueError(
            f"{experiment} round {round_}: {missing} not recorded; the round cannot be committed"
        )
    run_id = tracker.round_run(store, experiment, round_, config.to_dict())
    parent = tracker.experiment_run(store, experiment, config.to_dict())
    metrics = {
        k: v for k, v in tracker.client().get_run(run_id).data.metrics.items() if SERIES_MARK not in k
    }  # series stay on the round's run
    if not tracker.logged_at_step(parent, "evaluation/success_rate", round_):
        tracker.log(parent, metrics=metrics, step=round_)
    tracker.close(run_id)
    tracker.close(parent)
    failpoint("commit:round")
    records |= {kind: recorded[kind] for kind in OPTIONAL_ROUND_KINDS if kind in recorded}
    hashes = {kind: record.content_hash for kind, record in records.items() if record is not None}
    commit = record_round_commit(store, RoundCommit(experiment, round_, context.run_id, run_id, hashes))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(config_hash(commit.artifacts)),
        metadata={
            "mlflow_run_id": run_id,
            "mlflow_parent_run_id": parent,
            "artifacts": len(hashes),
            **{k: round(v, 4) for k, v in metrics.items() if k.startswith("evaluation/")},
        },
    )
