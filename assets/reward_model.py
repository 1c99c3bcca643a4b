"""`reward_model`: the round's step-reward model (PRIME's implicit PRM, SPA-RL's progress estimator) and its
value of every step, for the estimators that read one (`creditline.round.fit_reward_model`).

For any other estimator the asset records nothing and says so in its metadata: it is in every round so the
round's graph does not depend on the estimator. With one, it writes two artifacts:

    reward_model    the model after this round's update, a HF folder (`r<NNN>/reward_model/`):
                    initialized from the previous round's reward model (round 1: the initial policy),
                    trained on the steps and the episodes' success (prime) or the scores' episode reward
                    (spa)
    model_rewards   (S rows) episode_id, step_idx, model_reward: the updated model's value of every step

Both are recorded at the end, the model first. A run killed before that leaves nothing recorded; one killed
between the two records leaves the model without its values. Either way the next attempt trains again from the
same parent with the same seed and records both anew, the model replaced (on CPU the same folder: the kill
matrix's prime cases end with the checkpoints of an uninterrupted run).
"""

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
from creditline.credit.reward_model import load_reward_model, reward_model_kind
from creditline.engines import release_generation_memory
from creditline.faults import failpoint
from creditline.lineage_chain import parent_record, verify_checkpoint
from creditline.policy.models import load_optimizer_state, load_policy, save_policy
from creditline.round import fit_reward_model
from creditline.store import ArtifactRecord, hashed_folder, read_parquet
from resources import LineageResource, TrackerResource

VERSION = code_version(__name__)


@dg.asset(
    partitions_def=ROUNDS,
    deps=["episodes", "steps", "scores"],
    group_name="round",
    code_version=VERSION,
    pool="gpu",
    description="The step-reward model trained on this round (prime, spa) and its value of every step; "
    "nothing for other estimators.",
)
def reward_model(context: dg.AssetExecutionContext, lineage: LineageResource, tracker: TrackerResource):
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    kind = reward_model_kind(config.advantages.estimator)
    if kind is None:
        return dg.MaterializeResult(
            metadata={
                "reward_model": f"none: estimator {config.advantages.estimator!r} reads no model reward"
            }
        )
    store = lineage.store()
    inputs = ("episodes", "steps") if kind.target == "success" else ("steps", "scores")
    with store.session():  # the lineage reads only
        records = {name: lookup_artifact(lineage, experiment, round_, name) for name in inputs}
        initial = parent_record(store, experiment, 1)  # the initial policy (a clear error when there is none)
        previous = (
            initial if round_ == 1 else lookup_artifact(lineage, experiment, round_ - 1, "reward_model")
        )
        parents = [
            (previous.content_hash, "initialized_from"),
            *((r.content_hash, "trained_on") for r in records.values()),
        ]
        model_record = recorded_output(
            lineage, experiment, round_, "reward_model", parents, meta={"kind": kind.name}
        )
        rewards_record = (
            None
            if model_record is None
            else recorded_output(
                lineage,
                experiment,
                round_,
                "model_rewards",
                [
                    (model_record.content_hash, "computed_by"),
                    (records["steps"].content_hash, "computed_from"),
                ],
            )
        )
    model_record = reusable(lineage, model_record)
    rewards_record = reusable(lineage, rewards_record) if model_record is not None else None
    written = None
    if model_record is not None and rewards_record is not None:  # an earlier attempt got this far
        rewards, metrics = read_parquet(rewards_record.path), []
    else:
        release_generation_memory()  # vLLM's weights and KV cache leave the GPU the training needs
        verify_checkpoint(previous)
        tables = {name: read_checked(record) for name, record in records.items()}
        model, tokenizer = load_reward_model(kind, previous.path, config.seed, config.rollouts.device)
        reference = None
        if kind.needs_reference:
            verify_checkpoint(initial)
            reference = load_policy(initial.path, config.rollouts.device)[0]
        rewards, metrics, optimizer_state = fit_reward_model(
            model,
            reference,
            tokenizer,
            tables.get("episodes"),
            tables["steps"],
            tables.get("scores"),
            config,
            round_,
            load_optimizer_state(previous.path) if round_ > 1 else None,
        )
        folder = save_policy(
            model, tokenizer, lineage.round_dir(experiment, round_) / "reward_model", optimizer_state
        )
        content_hash, on_disk = hashed_folder(folder)
        written = write_table(lineage, rewards, table="model_rewards", experiment=experiment, round_=round_)
    run_id = round_run(lineage, tracker, config, round_)
    with store.session():  # the records only
        if written is not None:  # else an earlier attempt recorded both
            model_record = store.record_artifact(
                ArtifactRecord(
                    experiment,
                    round_,
                    "reward_model",
                    str(folder),
                    content_hash,
                    dagster_run_id=context.run_id,
                    meta={"kind": kind.name, **on_disk},
                ),
                parents,
            )
            failpoint("after:reward_model")
            rewards_record = record_table(
                context,
                lineage,
                written,
                kind="model_rewards",
                experiment=experiment,
                round_=round_,
                parents=[
                    (model_record.content_hash, "computed_by"),
                    (records["steps"].content_hash, "computed_from"),
                ],
                meta={"kind": kind.name},
            )
        record_run(context, lineage, config, "reward_model", VERSION, round_, run_id)
    values = rewards["model_reward"]
    summary = {
        "value_mean": float(values.mean()),
        "value_std": float(values.std()),
        **({"loss": metrics[-1]["loss"], "updates": len(metrics)} if metrics else {}),
    }
    series = [{"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"])} for m in metrics]
    log_round(context, tracker, "reward_model", run_id, model_record, summary, series=series)
    return materialized(rewards_record, kind=kind.name, reward_model=model_record.content_hash, **summary)
