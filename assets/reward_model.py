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
from assets.partitions import ROUNDS
from assets.stage import Stage, read_checked
from creditline.engines import release_generation_memory
from creditline.lineage_chain import parent_record, verify_checkpoint
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
    from creditline.credit.reward_model import load_reward_model, reward_model_kind
    from creditline.policy.models import load_optimizer_state, load_policy, save_policy
    from creditline.round import fit_reward_model

    stage = Stage(context, lineage, tracker, "reward_model", VERSION)
    config, round_ = stage.config, stage.round
    kind = reward_model_kind(config.advantages.estimator)
    if kind is None:
        return dg.MaterializeResult(
            metadata={
                "reward_model": f"none: estimator {config.advantages.estimator!r} reads no model reward"
            }
        )
    with stage.reads():
        inputs = {name: stage.input(name) for name in kind.inputs}
        initial = parent_record(
            stage.store, stage.experiment, 1
        )  # the initial policy (a clear error if none)
        previous = initial if round_ == 1 else stage.input("reward_model", round_=round_ - 1)
        trained_on = [(record.content_hash, "trained_on") for record in inputs.values()]
        model = stage.folder(
            "reward_model", [(previous.content_hash, "initialized_from"), *trained_on], {"kind": kind.name}
        )
        computed_from = (inputs["steps"].content_hash, "computed_from")
        values = stage.table("model_rewards", [(model, "computed_by"), computed_from], {"kind": kind.name})

    def compute():
        release_generation_memory()  # vLLM's weights and KV cache leave the GPU the training needs
        verify_checkpoint(previous)
        tables = {name: read_checked(record) for name, record in inputs.items()}
        network, tokenizer = load_reward_model(kind, previous.path, config.seed, config.rollouts.device)
        reference = None
        if kind.needs_reference:
            verify_checkpoint(initial)
            reference = load_policy(initial.path, config.rollouts.device)[0]
        rewards, metrics, optimizer_state = fit_reward_model(
            network,
            reference,
            tokenizer,
            tables.get("episodes"),
            tables["steps"],
            tables.get("scores"),
            config,
            round_,
            load_optimizer_state(previous.path) if round_ > 1 else None,
        )
        fitted.extend(metrics)
        folder = lineage.round_dir(stage.experiment, round_) / "reward_model"
        return {
            "reward_model": save_policy(network, tokenizer, folder, optimizer_state),
            "model_rewards": rewards,
        }

    fitted: list[dict] = []  # the updates' metrics (none when an earlier attempt got this far)
    stage.produce(compute)
    summary = {
        "value_mean": float(values.value["model_reward"].mean()),
        "value_std": float(values.value["model_reward"].std()),
        **({"loss": fitted[-1]["loss"], "updates": len(fitted)} if fitted else {}),
    }
    series = [{"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"])} for m in fitted]
    stage.log(model.record, summary, series=series)
    return stage.materialized(
        values.record, kind=kind.name, reward_model=model.record.content_hash, **summary
    )
