"""The re-score branch: a round's stored rollouts scored with another rubric version. Never feeds training.

Partitioned by (round × rubric version). The rubric dimension is dynamic (`rubric_versions`): it holds
every version registered in code (`creditline.credit.rubrics.RUBRICS`) and every version the lineage store has
recorded, added by `pipelines.rubric_partitions.sync_rubric_partitions` (the CLI and the round sensor
call it). Adding or editing a rubric adds a version, whose partitions show as missing in the UI until a
backfill fills them; the old version stays a partition, so what was scored with it stays visible (its
re-score fails with one line if run again, since the code that defined it is gone). Files go to
`r<NNN>/rescore/<version>/`.
"""

import dagster as dg
import pandas as pd

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from assets.persist import log_round, materialized, persist_table, read_artifact, record_run, round_run
from creditline.credit.advantages import params_hash
from creditline.credit.rescore import compare_rescoring
from creditline.credit.reward_model import reward_model_kind
from creditline.credit.round_advantages import step_advantages
from creditline.credit.rubrics import rubric_by_version
from creditline.round import with_model_rewards
from creditline.store import record_rubrics
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)
RUBRIC_VERSIONS = dg.DynamicPartitionsDefinition(name="rubric_versions")
RESCORE = dg.MultiPartitionsDefinition({"round": ROUNDS, "rubric": RUBRIC_VERSIONS})
TO_ROUND = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="round")


def _partition(context) -> tuple[str, int, str]:
    keys = context.partition_key.keys_by_dimension
    experiment, round_ = parse_round_key(keys["round"])
    return experiment, round_, keys["rubric"]


@dg.asset(
    partitions_def=RESCORE,
    group_name="rescore",
    code_version=VERSION,
    deps=[
        dg.AssetDep("episodes", partition_mapping=TO_ROUND),
        dg.AssetDep("steps", partition_mapping=TO_ROUND),
    ],
    description="The round's stored rollouts scored with another registered rubric version.",
)
def rescored_scores(context: dg.AssetExecutionContext, lineage: LineageResource):
    experiment, round_, version = _partition(context)
    rubric = rubric_by_version(version)  # fails with one line for a version no longer defined in code
    episodes, episodes_record = read_artifact(lineage, experiment, round_, "episodes")
    steps, steps_record = read_artifact(lineage, experiment, round_, "steps")
    frame = rubric.score(episodes, steps)
    record = persist_table(
        context,
        lineage,
        frame,
        table="scores",
        kind="rescore_scores",
        variant=version,
        experiment=experiment,
        round_=round_,
        parents=[(episodes_record.content_hash, "scored_from"), (steps_record.content_hash, "scored_from")],
        meta={"rubric_version": version},
    )
    record_rubrics(lineage.store(), [rubric])
    return materialized(
        record,
        rubric_version=version,
        episode_reward_mean=float(frame.drop_duplicates("episode_id")["episode_reward"].mean()),
    )


@dg.asset(
    partitions_def=RESCORE,
    group_name="rescore",
    code_version=VERSION,
    deps=[
        "rescored_scores",
        dg.AssetDep("episodes", partition_mapping=TO_ROUND),
        dg.AssetDep("steps", partition_mapping=TO_ROUND),
        dg.AssetDep("scores", partition_mapping=TO_ROUND),
        dg.AssetDep("advantages", partition_mapping=TO_ROUND),
    ],
    description="Advantages recomputed from the re-scored rewards, compared with those the round trained on.",
)
def rescored_advantages(
    context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource
):
    experiment, round_, version = _partition(context)
    config = lineage.experiment(experiment)
    steps, steps_record = read_artifact(lineage, experiment, round_, "steps")
    rescored, rescored_record = read_artifact(lineage, experiment, round_, "rescore_scores", version)
    trained_scores, _ = read_artifact(lineage, experiment, round_, "scores")
    trained_advantages, trained_record = read_artifact(lineage, experiment, round_, "advantages")
    settings = config.advantages
    also_from, episodes = [], None
    if reward_model_kind(settings.estimator):  # the round's step-reward model, trained on the training rubric
        model_rewards, rewards_record = read_artifact(lineage, experiment, round_, "model_rewards")
        steps = with_model_rewards(steps, model_rewards)
        also_from.append((rewards_record.content_hash, "computed_from"))
    if settings.sample_filter != "none":  # the filter reads the episodes' success
        episodes, episodes_record = read_artifact(lineage, experiment, round_, "episodes")
        also_from.append((episodes_record.content_hash, "computed_from"))
    frame = step_advantages(steps, rescored, settings, episodes)
    record = persist_table(
        context,
        lineage,
        frame,
        table="advantages",
        kind="rescore_advantages",
        variant=version,
        experiment=experiment,
        round_=round_,
        parents=[
            (steps_record.content_hash, "computed_from"),
            (rescored_record.content_hash, "computed_from"),
            *also_from,
        ],
        meta={
            "rubric_version": version,
            "estimator": settings.estimator,
            "params": settings.params,
            "params_hash": params_hash(settings.estimator, settings.params),
        },
    )
    comparison = compare_rescoring(trained_scores, rescored, trained_advantages, frame)
    summary = {
        "round": round_,
        "training_rubric": str(trained_scores["rubric_version"].iloc[0]),
        "rescored_rubric": version,
        **vars(comparison),
    }
    compared = persist_table(
        context,
        lineage,
        pd.DataFrame([summary]),
        table="rescore_comparison",
        kind="rescore_comparison",
        variant=version,
        experiment=experiment,
        round_=round_,
        parents=[(record.content_hash, "compares"), (trained_record.content_hash, "compares")],
        meta=summary,
    )
    metrics = {f"{version}.{k}": v for k, v in vars(comparison).items() if isinstance(v, float)}
    run_id = round_run(lineage, tracker, config, round_)
    record_run(context, lineage, config, "rescore", VERSION, round_, run_id)
    log_round(context, tracker, "rescore", run_id, compared, metrics)
    return materialized(
        record,
        rubric_version=version,
        compared_with=summary["training_rubric"],
        **{k: (v if v is not None else float("nan")) for k, v in vars(comparison).items()},
    )
