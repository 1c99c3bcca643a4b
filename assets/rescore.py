"""The re-score branch: a round's stored rollouts scored with another rubric version. Never feeds training.

Partitioned by (round × rubric version). The rubric dimension is dynamic (`rubric_versions`): it holds
every version of a rubric that loads now (the built-ins and the registered plugins:
`creditline.credit.rubric_registry`) and every version the lineage store has recorded, added by
`pipelines.rubric_partitions.sync_rubric_partitions` (the CLI and the round sensor call it). Adding or
editing a rubric adds a version, whose partitions show as missing in the UI until a backfill fills them;
the old version stays a partition, so what was scored with it stays visible (its re-score fails with one
line if run again, since the code that defined it is gone). A version's rubric is looked for among those
that load now and by the name or import path the store recorded it with (a rubric named by import path
only, in a config or in `creditline rescore --rubric`). Files go to `r<NNN>/rescore/<version>/`.
"""

import dagster as dg
import pandas as pd

from assets.code_version import code_version
from assets.partitions import ROUNDS, RUBRIC_VERSIONS, parse_round_key
from assets.stage import Stage, read_checked
from creditline.credit.advantages import params_hash
from creditline.credit.rescore import RescoreComparison, compare_rescoring
from creditline.credit.round_advantages import (
    ID_COLUMNS,
    reads_model_rewards,
    step_advantages,
    with_model_rewards,
    with_string_ids,
)
from creditline.credit.rubric_registry import rubric_by_version
from creditline.store import record_rubrics, rubric_versions
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)
RESCORE = dg.MultiPartitionsDefinition({"round": ROUNDS, "rubric": RUBRIC_VERSIONS})
TO_ROUND = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="round")


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
    stage, version = _stage(context, lineage, None)
    recorded = [r.source for r in rubric_versions(stage.store) if r.version == version and r.source]
    source, rubric = rubric_by_version(version, recorded)  # one line for a version no longer defined
    with stage.reads():
        episodes, steps = stage.input("episodes"), stage.input("steps")
        parents = [(episodes.content_hash, "scored_from"), (steps.content_hash, "scored_from")]
        output = stage.table("rescore_scores", parents, {"rubric_version": version}, version, schema="scores")
    tables = read_checked(episodes), read_checked(steps)
    stage.produce(
        lambda: {"rescore_scores": rubric.score(*tables)},
        also_record=lambda s: record_rubrics(s, {source: rubric}),
    )
    return stage.materialized(
        output.record,
        rubric_version=version,
        episode_reward_mean=float(output.value.drop_duplicates("episode_id")["episode_reward"].mean()),
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
    stage, version = _stage(context, lineage, tracker)
    settings = stage.config.advantages
    model_rewards = reads_model_rewards(settings.estimator)  # the round's step-reward model (training rubric)
    filtered = settings.sample_filter != "none"  # the filter reads the episodes' success
    with stage.reads():
        episodes, steps, rescored = (
            stage.input("episodes"),
            stage.input("steps"),
            stage.input("rescore_scores", version),
        )
        trained_scores, trained = stage.input("scores"), stage.input("advantages")
        rewards = stage.input("model_rewards") if model_rewards else None
        parents = [steps, rescored, *([rewards] if rewards else []), *([episodes] if filtered else [])]
        meta = {
            "rubric_version": version,
            "estimator": settings.estimator,
            "params": settings.params,
            "params_hash": params_hash(settings.estimator, settings.params),
        }
        output = stage.table(
            "rescore_advantages",
            [(p.content_hash, "computed_from") for p in parents],
            meta,
            version,
            "advantages",
        )
        compared = stage.table(
            "rescore_comparison", [(output, "compares"), (trained.content_hash, "compares")], {}, version
        )
    rescored_table, trained_score_table = read_checked(rescored, ID_COLUMNS), read_checked(trained_scores)

    def compute():
        step_table = read_checked(steps, ID_COLUMNS)
        if rewards is not None:
            step_table = with_model_rewards(step_table, read_checked(rewards, ID_COLUMNS))
        frame = step_advantages(
            step_table, rescored_table, settings, read_checked(episodes) if filtered else None
        )
        comparison = compare_rescoring(
            trained_score_table, with_string_ids(rescored_table), read_checked(trained), frame
        )
        summary = {
            "round": stage.round,
            "training_rubric": str(trained_score_table["rubric_version"].iloc[0]),
            "rescored_rubric": version,
            **vars(comparison),
        }
        return {"rescore_advantages": frame, "rescore_comparison": (pd.DataFrame([summary]), summary)}

    stage.produce(compute)
    comparison = {
        k: v for k, v in compared.record.meta.items() if k in RescoreComparison.__dataclass_fields__
    }
    stage.log(compared.record, {f"{version}.{k}": v for k, v in comparison.items() if isinstance(v, float)})
    return stage.materialized(
        output.record,
        rubric_version=version,
        compared_with=compared.record.meta["training_rubric"],
        **{k: (v if v is not None else float("nan")) for k, v in comparison.items()},
    )


def _stage(context, lineage: LineageResource, tracker: TrackerResource | None) -> tuple[Stage, str]:
    """The stage of a (round × rubric version) partition, and the version (its outputs' variant)."""
    keys = context.partition_key.keys_by_dimension
    experiment, round_ = parse_round_key(keys["round"])
    return Stage(context, lineage, tracker, "rescore", VERSION, experiment, round_), keys["rubric"]
