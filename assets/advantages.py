"""`advantages`: one scalar per step row from the experiment's estimator
(`creditline.credit.round_advantages.step_advantages`), and a picture of where the credit went
(`creditline.credit.credit_plot`): Dagster metadata and an MLflow artifact."""

import base64

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS
from assets.stage import Stage, read_checked
from creditline.credit.advantages import params_hash
from creditline.credit.credit_plot import credit_episodes, credit_picture, credit_table
from creditline.credit.round_advantages import (
    ID_COLUMNS,
    reads_model_rewards,
    step_advantages,
    with_model_rewards,
    with_string_ids,
)
from creditline.store import write_bytes_atomic
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)


@dg.asset(
    partitions_def=ROUNDS,
    deps=["episodes", "steps", "scores", "reward_model"],
    group_name="round",
    code_version=VERSION,
    description="Step-level advantages from the experiment's estimator, one per step row.",
)
def advantages(context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource):
    stage = Stage(context, lineage, tracker, "advantages", VERSION)
    settings = stage.config.advantages
    digest = params_hash(settings.estimator, settings.params)
    filtered = settings.sample_filter != "none"  # a sample filter reads the episodes' success
    with stage.reads():
        episodes, steps, scores = (stage.input(kind) for kind in ("episodes", "steps", "scores"))
        # prime, spa: the step-reward model's values
        rewards = stage.input("model_rewards") if reads_model_rewards(settings.estimator) else None
        parents = [steps, scores, *([rewards] if rewards else []), *([episodes] if filtered else [])]
        meta = {"estimator": settings.estimator, "params": settings.params, "params_hash": digest}
        if filtered:
            meta |= {"sample_filter": settings.sample_filter, "filter_remove": settings.filter_remove}
        output = stage.table("advantages", [(p.content_hash, "computed_from") for p in parents], meta)
    episode_table = read_checked(episodes)
    step_table, score_table = (read_checked(r, ID_COLUMNS) for r in (steps, scores))

    def compute():
        values = step_table
        if rewards is not None:
            values = with_model_rewards(step_table, read_checked(rewards, ID_COLUMNS))
        return {"advantages": step_advantages(values, score_table, settings, episode_table)}

    stage.produce(compute)
    frame = output.value
    step_table, score_table = with_string_ids(step_table), with_string_ids(score_table)
    credit = credit_table(
        episode_table, step_table, score_table, frame, credit_episodes(episode_table, step_table)
    )
    title = f"{stage.experiment} round {stage.round}: credit per step"
    png = credit_picture(credit, settings.estimator, title)
    picture = lineage.round_dir(stage.experiment, stage.round) / "credit.png"
    write_bytes_atomic(png, picture)
    metrics = {
        "abs_mean": float(frame["advantage"].abs().mean()),
        "std": float(frame["advantage"].std()),
        "nonzero_share": float((frame["advantage"] != 0).mean()),
    }
    if "kept" in frame:
        metrics["filtered_share"] = float(1 - frame.drop_duplicates("episode_id")["kept"].mean())
    stage.log(output.record, metrics, artifacts=[str(picture)])
    inline = f"![credit per step](data:image/png;base64,{base64.b64encode(png).decode()})"
    return stage.materialized(
        output.record,
        estimator=settings.estimator,
        params_hash=digest,
        **metrics,
        credit_per_step=dg.MetadataValue.md(inline),
    )
