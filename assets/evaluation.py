"""`evaluation`: the round's checkpoint played greedily on held-out tasks (round 1 also scores the initial
policy), by creditline's engine on `env`, or by a verifiers environment (`[eval.verifiers]`)."""

import base64
from pathlib import Path

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS, parse_round_key
from assets.persist import (
    log_round,
    materialized,
    record_run,
    record_table,
    recorded_output,
    reusable,
    round_run,
    write_table,
)
from creditline.interop.verifiers_evaluation import evaluate_in_verifiers
from creditline.lineage_chain import verify_checkpoint
from creditline.plots import success_by_round
from creditline.policy.models import load_tokenizer
from creditline.round import evaluate_policy
from creditline.store import ArtifactRecord, EvaluationRecord, write_bytes_atomic
from resources import EngineResource, LineageResource, TrackerResource

VERSION = code_version(__name__)


def _evaluate_policy(
    context, lineage, engine, config, policy: ArtifactRecord | None, round_: int, run_id: str | None = None
) -> tuple[ArtifactRecord, list[EvaluationRecord]]:
    """Evaluate one checkpoint (None: round `round_`'s, as recorded), write its episode table, record its
    summary (and link this Dagster run to the round's MLflow run `run_id` in the same session); returns the
    table's record and the experiment's evaluations up to this round (the learning curve so far)."""
    store = lineage.store()
    with store.session():  # the lineage reads only
        policy = policy or store.artifact(config.name, round_, "checkpoint")
        if policy is None:
            raise FileNotFoundError(f"{config.name} round {round_}: no checkpoint recorded")
        parents = [(policy.content_hash, "evaluates")]
        record = recorded_output(lineage, config.name, round_, "evaluation", parents)
        history = [e for e in store.evaluations(config.name) if e.round <= round_]
    record = reusable(lineage, record)
    if record is not None and any(
        e.round == round_ and e.policy_hash == policy.content_hash for e in history
    ):
        if run_id is not None:  # an earlier attempt got this far
            record_run(context, lineage, config, "evaluation", VERSION, round_, run_id)
        return record, history
    verify_checkpoint(policy)
    if config.eval.verifiers.env_id:  # a verifiers environment plays the evaluation
        episodes, summary = evaluate_in_verifiers(config, policy.path, round_)
    else:
        episodes, summary = evaluate_policy(
            engine.load(policy.path, config.rollouts, policy.content_hash),
            load_tokenizer(policy.path),
            config,
            round_,
        )
    table = episodes[["episode_id", "task_id", "num_steps", "success", "env_return", "stop_reason"]].assign(
        policy_round=round_
    )
    written = write_table(lineage, table, table="evaluation", experiment=config.name, round_=round_)
    with store.session():  # the records only
        record = record_table(
            context,
            lineage,
            written,
            kind="evaluation",
            experiment=config.name,
            round_=round_,
            parents=parents,
            meta=vars(summary),
        )
        evaluation = store.record_evaluation(
            EvaluationRecord(config.name, round_, policy.content_hash, **vars(summary))
        )
        if run_id is not None:
            record_run(context, lineage, config, "evaluation", VERSION, round_, run_id)
    return record, [*(e for e in history if e.round != round_), evaluation]


@dg.asset(
    partitions_def=ROUNDS,
    deps=["checkpoint"],
    group_name="round",
    code_version=VERSION,
    pool="gpu",
    description="Held-out greedy success rate, return, steps and invalid-action rate of the round's policy.",
)
def evaluation(
    context: dg.AssetExecutionContext,
    lineage: LineageResource,
    engine: EngineResource,
    tracker: TrackerResource,
):
    experiment, round_ = parse_round_key(context.partition_key)
    config = lineage.experiment(experiment)
    store = lineage.store()
    if round_ == 1:  # the baseline: the initial policy, evaluated once
        _evaluate_policy(context, lineage, engine, config, store.initial_policy(experiment), 0)
    run_id = round_run(lineage, tracker, config, round_)
    record, history = _evaluate_policy(context, lineage, engine, config, None, round_, run_id)
    png = success_by_round(
        [e.round for e in history],
        [e.success_rate for e in history],
        [e.mean_return for e in history],
        f"{experiment}: held-out evaluation",
    )
    plot_path = Path(record.path).with_name("success_by_round.png")
    write_bytes_atomic(png, plot_path)
    summary = dict(record.meta)
    baseline = history[0].success_rate
    metrics = {k: summary[k] for k in ("success_rate", "mean_return", "mean_steps", "invalid_action_rate")}
    log_round(context, tracker, "evaluation", run_id, record, metrics, artifacts=[str(plot_path)])
    return materialized(
        record,
        success_rate=summary["success_rate"],
        mean_return=summary["mean_return"],
        invalid_action_rate=summary["invalid_action_rate"],
        success_gain_over_initial=summary["success_rate"] - baseline,
        success_by_round=dg.MetadataValue.md(
            f"![success by round](data:image/png;base64,{base64.b64encode(png).decode()})"
        ),
    )
