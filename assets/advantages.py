"""`advantages`: one scalar per step row and its expansion to one value per completion token."""

import dagster as dg
import pandas as pd

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from assets.persist import log_round, materialized, persist_table, read_artifact, recorded_output
from creditline.advantages import completion_advantages, compute, fill_preset, params_hash
from creditline.store import read_parquet
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)


def advantage_table(steps: pd.DataFrame, scores: pd.DataFrame, estimator: str, params: dict) -> pd.DataFrame:
    """Join steps with their scores on (episode_id, step_idx) and compute the estimator once, from the totals.

    An imported round's steps may carry the advantage their source assigned (`preset_advantage`, NaN where
    none): it is kept, and the estimator fills the rest (verifiers' fill-if-None, `fill_preset`)."""
    preset = ["preset_advantage"] if "preset_advantage" in steps else []
    joined = steps[["episode_id", "group_id", "step_idx", "anchor_key", "completion_ids", *preset]].merge(
        scores[["episode_id", "step_idx", "rubric_version", "step_reward", "episode_reward"]],
        on=["episode_id", "step_idx"], how="inner", validate="one_to_one",
    )  # fmt: skip
    if len(joined) != len(steps):
        raise ValueError(f"scores cover {len(joined)} of {len(steps)} step rows")
    advantage = compute(estimator, joined, **params)  # (S,)
    if preset:
        advantage = fill_preset(joined["preset_advantage"].to_numpy(dtype=float), advantage)
    lengths = joined["completion_ids"].map(len).to_numpy()
    return pd.DataFrame({
        "episode_id": joined["episode_id"], "group_id": joined["group_id"], "step_idx": joined["step_idx"],
        "rubric_version": joined["rubric_version"], "estimator": estimator,
        "params_hash": params_hash(estimator, params), "advantage": advantage, "completion_length": lengths,
        "completion_advantages": [a.tolist() for a in completion_advantages(advantage, lengths)],
    })  # fmt: skip


@dg.asset(
    partitions_def=ROUNDS,
    deps=["steps", "scores"],
    group_name="round",
    code_version=VERSION,
    description="Step-level advantages from the experiment's estimator, expanded per completion token.",
)
def advantages(context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource):
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    steps, steps_record = read_artifact(lineage, experiment, round_, "steps")
    scores, scores_record = read_artifact(lineage, experiment, round_, "scores")
    settings = config.advantages
    digest = params_hash(settings.estimator, settings.params)
    parents = [(steps_record.content_hash, "computed_from"), (scores_record.content_hash, "computed_from")]
    record = recorded_output(lineage, experiment, round_, "advantages", parents, meta={"params_hash": digest})
    if record is not None:  # an earlier attempt got this far
        frame = read_parquet(record.path)
    else:
        frame = advantage_table(steps, scores, settings.estimator, settings.params)
        record = persist_table(
            context, lineage, frame, table="advantages", experiment=experiment, round_=round_,
            meta={"estimator": settings.estimator, "params": settings.params, "params_hash": digest},
            parents=parents,
        )  # fmt: skip
    metrics = {
        "abs_mean": float(frame["advantage"].abs().mean()),
        "std": float(frame["advantage"].std()),
        "nonzero_share": float((frame["advantage"] != 0).mean()),
    }
    log_round(context, lineage, tracker, config, "advantages", VERSION, record, metrics)
    return materialized(record, estimator=settings.estimator, params_hash=digest, **metrics)
