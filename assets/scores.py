"""`scores`: the round's rollouts scored with the experiment's training rubric."""

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from assets.persist import log_round, materialized, persist_table, read_artifact, recorded_output
from creditline.rubrics import get_rubric
from creditline.store import read_parquet, record_rubrics
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
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    episodes, episodes_record = read_artifact(lineage, experiment, round_, "episodes")
    steps, steps_record = read_artifact(lineage, experiment, round_, "steps")
    rubric = get_rubric(config.rubric)
    parents = [(episodes_record.content_hash, "scored_from"), (steps_record.content_hash, "scored_from")]
    meta = {"rubric_version": rubric.version}
    record = recorded_output(lineage, experiment, round_, "scores", parents, meta=meta)
    if record is not None:  # an earlier attempt got this far
        frame = read_parquet(record.path)
    else:
        frame = rubric.score(episodes, steps)
        record = persist_table(context, lineage, frame, table="scores", experiment=experiment, round_=round_,
                               meta=meta, parents=parents)  # fmt: skip
    record_rubrics(lineage.store(), [rubric])  # the version stays a re-score partition
    episode_reward = frame.drop_duplicates("episode_id")["episode_reward"]
    metrics = {
        "episode_reward_mean": float(episode_reward.mean()),
        "episode_reward_std": float(episode_reward.std()),
    }
    log_round(context, lineage, tracker, config, "scores", VERSION, record, metrics)
    return materialized(record, rubric_version=rubric.version, **metrics)
