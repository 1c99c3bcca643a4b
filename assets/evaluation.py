"""`evaluation`: the round's checkpoint played greedily on held-out tasks (round 1 also scores the initial
policy), by creditline's engine on `env`, or by a verifiers environment (`[eval.verifiers]`)."""

import base64
from pathlib import Path

import dagster as dg

from assets.code_version import code_version
from assets.partitions import ROUNDS
from assets.stage import Stage
from creditline.lineage_chain import verify_checkpoint
from creditline.plots import success_by_round
from creditline.store import ArtifactRecord, EvaluationRecord, write_bytes_atomic
from resources import EngineResource, LineageResource, TrackerResource

VERSION = code_version(__name__)
EVALUATION_COLUMNS = ("episode_id", "task_id", "num_steps", "success", "env_return", "stop_reason")
SUMMARY_FIELDS = ("success_rate", "mean_return", "mean_steps", "invalid_action_rate", "episodes")
"""The evaluation record's fields, kept in the table's record as facts (`EvaluationSummary`)."""


def _evaluate_policy(
    stage: Stage, engine: EngineResource, policy: ArtifactRecord | None, link_run: bool
) -> tuple[ArtifactRecord, list[EvaluationRecord]]:
    """Evaluate one checkpoint (None: the stage's round's, as recorded): write its episode table, record it
    and its summary; returns the table's record and the experiment's evaluations up to this round (the
    learning curve so far)."""
    from creditline.interop.verifiers_evaluation import evaluate_in_verifiers
    from creditline.policy.models import load_tokenizer
    from creditline.round import evaluate_policy

    config, round_ = stage.config, stage.round
    with stage.reads():
        policy = policy or stage.input("checkpoint")
        output = stage.table("evaluation", [(policy.content_hash, "evaluates")])
        history = [e for e in stage.store.evaluations(config.name) if e.round <= round_]

    def compute():
        verify_checkpoint(policy)
        loaded = engine.load(policy.path, config.rollouts, policy.content_hash)
        if config.eval.verifiers.env_id:  # a verifiers environment plays the evaluation, served by `loaded`
            episodes, summary = evaluate_in_verifiers(config, loaded, policy.path, round_)
        else:
            episodes, summary = evaluate_policy(loaded, load_tokenizer(policy.path), config, round_)
        table = episodes[list(EVALUATION_COLUMNS)].assign(policy_round=round_)
        return {"evaluation": (table, vars(summary))}

    evaluation: list[EvaluationRecord] = []

    def record_summary(store):  # upserted, also on resume (on Postgres a kill may split the records)
        summary = {name: output.record.meta[name] for name in SUMMARY_FIELDS}
        evaluation.append(
            store.record_evaluation(EvaluationRecord(config.name, round_, policy.content_hash, **summary))
        )

    stage.produce(compute, also_record=record_summary, link_run=link_run)
    return output.record, [*(e for e in history if e.round != round_), *evaluation]


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
    stage = Stage(context, lineage, tracker, "evaluation", VERSION)
    if stage.round == 1:  # the baseline: the initial policy, evaluated once
        initial = Stage(context, lineage, tracker, "evaluation", VERSION, stage.experiment, round_=0)
        _evaluate_policy(initial, engine, stage.store.initial_policy(stage.experiment), link_run=False)
    record, history = _evaluate_policy(stage, engine, None, link_run=True)
    png = success_by_round(
        [e.round for e in history],
        [e.success_rate for e in history],
        [e.mean_return for e in history],
        f"{stage.experiment}: held-out evaluation",
    )
    plot_path = Path(record.path).with_name("success_by_round.png")
    write_bytes_atomic(png, plot_path)
    summary = dict(record.meta)
    baseline = history[0].success_rate
    metrics = {k: summary[k] for k in ("success_rate", "mean_return", "mean_steps", "invalid_action_rate")}
    stage.log(record, metrics, artifacts=[str(plot_path)])
    return stage.materialized(
        record,
        success_rate=summary["success_rate"],
        mean_return=summary["mean_return"],
        invalid_action_rate=summary["invalid_action_rate"],
        success_gain_over_initial=summary["success_rate"] - baseline,
        success_by_round=dg.MetadataValue.md(
            f"![success by round](data:image/png;base64,{base64.b64encode(png).decode()})"
        ),
    )
