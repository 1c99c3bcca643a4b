"""`scores`: the round's rollouts scored with the experiment's training rubric."""

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS
from assets.stage import Stage, read_checked
from creditline.credit.rubric_registry import get_rubric
from creditline.store import record_rubrics
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)


@dg.asset(
    partitions_def=ROUNDS,
    deps=["episodes", "steps"],
    group_name="round",
    code_version=VERSION,
    description="Per step row: each rubric criterion, the rubric's step reward and episode total.",
)
def scores(context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource):
    from creditline.round import score_rollouts

    stage = Stage(context, lineage, tracker, "scores", VERSION)
    rubric = get_rubric(stage.config.rubric)
    with stage.reads():
        episodes, steps = stage.input("episodes"), stage.input("steps")
        parents = [(episodes.content_hash, "scored_from"), (steps.content_hash, "scored_from")]
        output = stage.table("scores", parents, meta={"rubric_version": rubric.version})
    tables = read_checked(episodes), read_checked(steps)
    stage.produce(
        lambda: {"scores": score_rollouts(stage.config, *tables)},
        also_record=lambda store: record_rubrics(
            store, {stage.config.rubric: rubric}
        ),  # the version stays a re-score partition
    )
    episode_reward = output.value.drop_duplicates("episode_id")["episode_reward"]
    metrics = {
        "episode_reward_mean": float(episode_reward.mean()),
        "episode_reward_std": float(episode_reward.std()),
    }
    stage.log(output.record, metrics)
    return stage.materialized(output.record, rubric_version=rubric.version, **metrics)
