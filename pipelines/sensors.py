"""The round sensor: advances every registered experiment, one round at a time.

Schedules cannot add dynamic partitions, so a sensor does it. On each tick, for each experiment in
the lineage store: if no run of it is in flight, and its newest round finished (the run succeeded,
so its blocking checks passed, and its evaluation is recorded), and it has not reached its `rounds`,
the sensor adds the next round's partition and requests its run. The run key is the partition key,
so a repeated tick never launches the same round twice. An optional cron window (UTC) limits when
rounds may start, e.g. only at night.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import dagster as dg

from assets.partitions import ROUNDS, parse_round_key, round_key
from pipelines.cron_window import in_window
from resources import LineageResource

EXPERIMENT_TAG = "creditline/experiment"
WINDOW_ENV = "CREDITLINE_ROUND_WINDOW"
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]  # fmt: skip


def _rounds_by_experiment(instance: dg.DagsterInstance) -> dict[str, list[int]]:
    rounds: dict[str, list[int]] = {}
    for key in instance.get_dynamic_partitions(ROUNDS.name):
        experiment, round_ = parse_round_key(key)
        rounds.setdefault(experiment, []).append(round_)
    return rounds


def _in_flight(instance: dg.DagsterInstance, experiment: str, latest_key: str | None) -> bool:
    tagged = instance.get_runs(dg.RunsFilter(tags={EXPERIMENT_TAG: experiment}, statuses=IN_FLIGHT), limit=1)
    if tagged or latest_key is None:
        return bool(tagged)
    return bool(
        instance.get_runs(dg.RunsFilter(tags={"dagster/partition": latest_key}, statuses=IN_FLIGHT), limit=1)
    )


def _finished(instance: dg.DagsterInstance, lineage: LineageResource, experiment: str, round_: int) -> bool:
    runs = instance.get_runs(
        dg.RunsFilter(tags={"dagster/partition": round_key(experiment, round_)}), limit=1
    )
    evaluated = any(e.round == round_ for e in lineage.store().evaluations(experiment))
    return evaluated and (not runs or runs[0].status == dg.DagsterRunStatus.SUCCESS)


def next_rounds(
    instance: dg.DagsterInstance, lineage: LineageResource
) -> tuple[list[dg.RunRequest], list[str]]:
    """The run requests this tick should make, and why each other experiment waits."""
    requests, waiting = [], []
    known = _rounds_by_experiment(instance)
    for experiment in lineage.store().experiments():
        config = lineage.experiment(experiment)
        latest = max(known.get(experiment, [0]))
        latest_key = round_key(experiment, latest) if latest else None
        if _in_flight(instance, experiment, latest_key):
            waiting.append(f"{experiment}: round {latest} in flight")
        elif latest and not _finished(instance, lineage, experiment, latest):
            waiting.append(f"{experiment}: round {latest} has not finished successfully")
        elif latest >= config.rounds:
            waiting.append(f"{experiment}: all {config.rounds} rounds done")
        else:
            key = round_key(experiment, latest + 1)
            requests.append(dg.RunRequest(run_key=key, partition_key=key, tags={EXPERIMENT_TAG: experiment}))
    return requests, waiting


@dg.sensor(job_name="round", minimum_interval_seconds=10, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Adds each experiment's next round partition when the previous round finished.")  # fmt: skip
def round_sensor(context: dg.SensorEvaluationContext, lineage: LineageResource):
    window = os.environ.get(WINDOW_ENV)
    if not in_window(window, datetime.now(UTC)):
        return dg.SkipReason(f"outside the round window {window!r} (UTC)")
    requests, waiting = next_rounds(context.instance, lineage)
    if not requests:
        return dg.SkipReason("; ".join(waiting) or "no experiments registered")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[ROUNDS.build_add_request([r.partition_key for r in requests])],
    )
