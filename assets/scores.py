"""`scores`: the round's rollouts scored with the experiment's training rubric."""

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from assets.persist import (
    log_round,
    lookup_artifact,
    materialized,
    read_checked,
    record_run,
    record_table,
    recorded_output,
    reusable,
    round_run,
    write_table,
)
from creditline.credit.rubrics import get_rubric
from creditline.round import score_rollouts
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
    rubric = get_rubric(config.rubric)
    meta = {"rubric_version": rubric.version}
    store = lineage.store()
    with store.session():  # the lineage reads only
        episodes_record = lookup_artifact(lineage, experiment, round_, "episodes")
        steps_record = lookup_artifact(lineage, experiment, round_, "steps")
        parents = [(episodes_record.content_hash, "scored_from"), (steps_record.content_hash, "scored_from")]
        record = recorded_output(lineage, experiment, round_, "scores", parents, meta=meta)
    record = reusable(lineage, record)
    episodes, steps = read_checked(episodes_record), read_checked(steps_record)
    frame = read_parquet(record.path) if record is not None else score_rollouts(config, episodes, steps)
    episode_reward = frame.drop_duplicates("episode_id")["episode_reward"]
    metrics = {
        "episode_reward_mean": float(episode_reward.mean()),
        "episode_reward_std": float(episode_reward.std()),
    }
    written = (
        None
        if record is not None
        else write_table(lineage, frame, table="scores", experiment=experiment, round_=round_)
    )
    run_id = round_run(lineage, tracker, config, round_)
    with store.session():  # the records only
        if written is not None:  # else an earlier attempt got this far
            record = record_table(
                context,
                lineage,
                written,
                kind="scores",
                experiment=experiment,
                round_=round_,
                meta=meta,
                parents=parents,
            )
        record_rubrics(store, [rubric])  # the version stays a re-score partition
        record_run(context, lineage, config, "scores", VERSION, round_, run_id)
    log_round(context, tracker, "scores", run_id, record, metrics)
    return materialized(record, rubric_version=rubric.version, **metrics)
