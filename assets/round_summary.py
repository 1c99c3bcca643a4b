"""`round_summary`: the round's commit point, written last.

It runs after `evaluation` and its blocking check. It copies the round's metrics from the round's
MLflow run to the experiment's parent run with step = round (the learning curves), closes both runs
FINISHED, and then writes the commit row. Only a committed round counts as done for `creditline run`,
the round sensor and `verify`; a process killed at any earlier instant leaves the round uncommitted,
and running the round again completes it (each stage reuses what an earlier attempt recorded).
"""

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS, RUBRIC_VERSIONS, parse_round_key
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
    logged = tracker.client().get_run(run_id).data.metrics
    # series stay on the round's run; the headline curves first (MLflow lists a run's metrics in that order)
    metrics = {k: logged[k] for k in sorted(logged, key=_headline_first) if SERIES_MARK not in k}
    if round_ == 1 and not tracker.logged_at_step(parent, "evaluation/success_rate", 0):
        # the curves' baseline: the initial policy
        tracker.log(parent, metrics=_initial_policy_metrics(store, experiment), step=0)
    if not tracker.logged_at_step(parent, "evaluation/success_rate", round_):
        tracker.log(parent, metrics=metrics, step=round_)
    tracker.close(run_id)
    tracker.close(parent)
    failpoint("commit:round")
    records |= {kind: recorded[kind] for kind in OPTIONAL_ROUND_KINDS if kind in recorded}
    hashes = {kind: record.content_hash for kind, record in records.items() if record is not None}
    commit = record_round_commit(store, RoundCommit(experiment, round_, context.run_id, run_id, hashes))
    _fill_training_rubric_cell(context, records)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(config_hash(commit.artifacts)),
        metadata={
            "mlflow_run_id": run_id,
            "mlflow_run": dg.MetadataValue.url(tracker.run_url(run_id)),
            "mlflow_parent_run_id": parent,
            "mlflow_experiment_run": dg.MetadataValue.url(tracker.run_url(parent)),
            "artifacts": len(hashes),
            **{k: round(v, 4) for k, v in metrics.items() if k.startswith("evaluation/")},
        },
    )


HEADLINE = ("evaluation/success_rate", "evaluation/mean_return")


def _headline_first(key: str) -> tuple[int, str]:
    return (HEADLINE.index(key) if key in HEADLINE else len(HEADLINE), key)


def _initial_policy_metrics(store, experiment: str) -> dict[str, float]:
    """The initial policy's evaluation (round 0), under the keys the rounds log theirs."""
    initial = next(e for e in store.evaluations(experiment) if e.round == 0)
    names = ("success_rate", "mean_return", "mean_steps", "invalid_action_rate")
    return {f"evaluation/{name}": float(getattr(initial, name)) for name in names}


def _fill_training_rubric_cell(context: dg.AssetExecutionContext, records: dict) -> None:
    """Mark the re-score grid's (round, training rubric) cell materialised: the round's own `scores` and
    `advantages` are that rubric's re-score, so the cell is never "missing" (nothing is computed again)."""
    version = records["scores"].meta["rubric_version"]
    instance = context.instance
    if not instance.has_dynamic_partition(RUBRIC_VERSIONS.name, version):
        instance.add_dynamic_partitions(RUBRIC_VERSIONS.name, [version])
    key = dg.MultiPartitionKey({"round": context.partition_key, "rubric": version})
    for asset, kind in (("rescored_scores", "scores"), ("rescored_advantages", "advantages")):
        context.log_event(
            dg.AssetMaterialization(
                asset,
                partition=str(key),
                metadata={
                    "content_hash": records[kind].content_hash,
                    "same_as": f"the round's own {kind} (the training rubric)",
                },
            )
        )
