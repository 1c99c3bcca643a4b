"""The round sensor: advances every registered experiment, one round at a time.

Schedules cannot add dynamic partitions, so a sensor does it. On each tick it first reclaims what
dead runs left (`pipelines.reaper`: runs marked failed, pool slots freed, MLflow runs closed) and
makes every rubric version a partition. Before it requests an experiment's round it clears the temp
files and folders that dead writers left under the experiment's folder (`remove_orphans`: a worker
killed mid-write leaves one, and `verify` would report it for ever). Then, for each experiment in the lineage
store: unless a `creditline run` holds the experiment's lease or a round of it is in flight, it requests the
first round without a commit point, up to the config's `rounds`, adding its partition. A round whose last
run was killed (reaped) is requested again, up to MAX_ATTEMPTS; a round that failed for another
reason (a step failed) waits for a person. The run key is the partition key (plus the attempt), so a repeated
tick never launches the same attempt twice. An optional cron window (UTC) limits when rounds may start.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from assets.partitions import ROUNDS, parse_round_key, round_key
from creditline.store.leases import lease_holder
from creditline.store.orphans import remove_orphans
from creditline.store.rounds import round_commits
from pipelines.cron_window import in_window
from pipelines.reaper import IN_FLIGHT, PARTITION_TAG, REAPED_TAG, close_round_tracking, reap_dead_runs
from pipelines.rubric_partitions import sync_rubric_partitions
from resources import LineageResource

EXPERIMENT_TAG = "creditline/experiment"
WINDOW_ENV = "CREDITLINE_ROUND_WINDOW"
MAX_ATTEMPTS = 3
"""A round killed this many times in a row is left for a person to look at."""


def _in_flight(instance: dg.DagsterInstance, experiment: str) -> dg.DagsterRun | None:
    runs = instance.get_runs(dg.RunsFilter(tags={EXPERIMENT_TAG: experiment}, statuses=IN_FLIGHT), limit=1)
    return runs[0] if runs else None


def _was_killed(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """A failed run whose process died (reaped by us, or found dead by Dagster's launcher) rather than
    one whose code failed: no step of it failed."""
    if run.tags.get(REAPED_TAG) == "true":
        return True
    failures = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE, limit=1)
    return not failures.records


def _next_request(instance: dg.DagsterInstance, experiment: str, round_: int) -> dg.RunRequest | str:
    """The run request for `round_`, or why it must wait."""
    key = round_key(experiment, round_)
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": key}))  # newest first
    attempt = len(runs) + 1
    if runs and runs[0].status == dg.DagsterRunStatus.FAILURE:
        if not _was_killed(instance, runs[0]):
            return (
                f"{experiment}: round {round_} failed (dagster run {runs[0].run_id[:8]}); "
                "fix the cause, then re-execute it or `creditline run`"
            )
        if attempt > MAX_ATTEMPTS:
            return f"{experiment}: round {round_} was killed {len(runs)} times; re-run it by hand"
    run_key = key if attempt == 1 else f"{key}/attempt-{attempt}"
    return dg.RunRequest(run_key=run_key, partition_key=key, tags={EXPERIMENT_TAG: experiment})


def next_rounds(
    instance: dg.DagsterInstance, lineage: LineageResource
) -> tuple[list[dg.RunRequest], list[str], list[str]]:
    """(run requests this tick makes, why each other experiment waits, what was cleaned up)."""
    store = lineage.store()
    cleaned = reap_dead_runs(instance, lineage.data_root)
    sync_rubric_partitions(instance, store)
    requests, waiting = [], []
    for experiment in store.experiments():
        config = lineage.experiment(experiment)
        done = round_commits(store, experiment)
        pending = [r for r in range(1, config.rounds + 1) if r not in done]
        if (holder := lease_holder(store, experiment)) is not None:
            waiting.append(f"{experiment}: being run by `creditline run` ({holder})")
        elif (run := _in_flight(instance, experiment)) is not None:
            waiting.append(f"{experiment}: {run.tags.get('dagster/partition', 'a round')} in flight")
        elif not pending:
            waiting.append(f"{experiment}: all {config.rounds} rounds done")
        elif isinstance(request := _next_request(instance, experiment, pending[0]), str):
            waiting.append(request)
        else:
            requests.append(request)
            cleaned += [
                f"removed {o.path}: left by a writer that died ({o.reason})"
                for o in remove_orphans(Path(lineage.data_root) / experiment)
            ]
    return requests, waiting, cleaned


@dg.sensor(
    job_name="round",
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Requests each experiment's next uncommitted round; reclaims dead runs first.",
)
def round_sensor(context: dg.SensorEvaluationContext, lineage: LineageResource):
    window = os.environ.get(WINDOW_ENV)
    if not in_window(window, datetime.now(UTC)):
        return dg.SkipReason(f"outside the round window {window!r} (UTC)")
    requests, waiting, cleaned = next_rounds(context.instance, lineage)
    for line in cleaned:
        context.log.warning(line)
    if not requests:
        return dg.SkipReason("; ".join(cleaned + waiting) or "no experiments registered")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[ROUNDS.build_add_request(sorted({r.partition_key for r in requests}))],
    )


@dg.run_failure_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Sets the MLflow runs of a failed round FAILED (a failure in the UI, not a kill).",
)
def round_failure_sensor(context: dg.RunFailureSensorContext, lineage: LineageResource):
    if context.dagster_run.job_name != "round":
        return
    experiment, round_ = parse_round_key(context.dagster_run.tags.get(PARTITION_TAG, ""))
    closed = close_round_tracking(lineage.data_root, experiment, round_, "FAILED")
    if closed:
        context.log.info(f"{experiment} round {round_}: MLflow runs {', '.join(closed)} set FAILED")
