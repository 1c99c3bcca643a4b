"""`advantages`: one scalar per step row from the experiment's estimator
(`creditline.credit.round_advantages.step_advantages`), and a picture of where the credit went
(`creditline.credit.credit_plot`): Dagster metadata and an MLflow artifact."""

import base64

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
from creditline.credit.advantages import params_hash
from creditline.credit.credit_plot import credit_episodes, credit_picture, credit_table
from creditline.credit.reward_model import reward_model_kind
from creditline.credit.round_advantages import step_advantages
from creditline.round import with_model_rewards
from creditline.store import read_parquet, write_bytes_atomic
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
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    settings = config.advantages
    digest = params_hash(settings.estimator, settings.params)
    store = lineage.store()
    with store.session():  # the lineage reads only
        episodes_record = lookup_artifact(lineage, experiment, round_, "episodes")
        steps_record = lookup_artifact(lineage, experiment, round_, "steps")
        scores_record = lookup_artifact(lineage, experiment, round_, "scores")
        rewards_record = (  # prime, spa: the step-reward model's values
            lookup_artifact(lineage, experiment, round_, "model_rewards")
            if reward_model_kind(settings.estimator)
            else None
        )
        parents = [
            (steps_record.content_hash, "computed_from"),
            (scores_record.content_hash, "computed_from"),
            *([(rewards_record.content_hash, "computed_from")] if rewards_record else []),
            # a sample filter reads the episodes' success
            *([(episodes_record.content_hash, "computed_from")] if settings.sample_filter != "none" else []),
        ]
        record = recorded_output(
            lineage, experiment, round_, "advantages", parents, meta={"params_hash": digest}
        )
    record = reusable(lineage, record)
    episodes, steps, scores = (read_checked(r) for r in (episodes_record, steps_record, scores_record))
    if record is not None:  # an earlier attempt computed them
        frame = read_parquet(record.path)
    else:
        with_values = (
            steps if rewards_record is None else with_model_rewards(steps, read_checked(rewards_record))
        )
        frame = step_advantages(with_values, scores, settings, episodes)
    credit = credit_table(episodes, steps, scores, frame, credit_episodes(episodes, steps))
    png = credit_picture(credit, settings.estimator, f"{experiment} round {round_}: credit per step")
    picture = lineage.round_dir(experiment, round_) / "credit.png"
    write_bytes_atomic(png, picture)
    metrics = {
        "abs_mean": float(frame["advantage"].abs().mean()),
        "std": float(frame["advantage"].std()),
        "nonzero_share": float((frame["advantage"] != 0).mean()),
        **(
            {"filtered_share": float(1 - frame.drop_duplicates("episode_id")["kept"].mean())}
            if "kept" in frame
            else {}
        ),
    }
    written = (
        None
        if record is not None  # an earlier attempt got this far
        else write_table(lineage, frame, table="advantages", experiment=experiment, round_=round_)
    )
    run_id = round_run(lineage, tracker, config, round_)
    with store.session():  # the records only
        if written is not None:
            record = record_table(
                context,
                lineage,
                written,
                kind="advantages",
                experiment=experiment,
                round_=round_,
                meta={
                    "estimator": settings.estimator,
                    "params": settings.params,
                    "params_hash": digest,
                    **(
                        {"sample_filter": settings.sample_filter, "filter_remove": settings.filter_remove}
                        if settings.sample_filter != "none"
                        else {}
                    ),
                },
                parents=parents,
            )
        record_run(context, lineage, config, "advantages", VERSION, round_, run_id)
    log_round(context, tracker, "advantages", run_id, record, metrics, artifacts=[str(picture)])
    return materialized(
        record,
        estimator=settings.estimator,
        params_hash=digest,
        **metrics,
        credit_per_step=dg.MetadataValue.md(
            f"![credit per step](data:image/png;base64,{base64.b64encode(png).decode()})"
        ),
    )
