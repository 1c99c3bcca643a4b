"""Reclaiming what a dead run left behind: its Dagster run, its pool slots, its MLflow runs.

A process killed mid-round (OOM, pre-emption, SIGKILL) cannot mark its own run failed, so the run stays
STARTED and keeps the only slot of the `gpu` pool: every later round on the data root would queue
behind it forever. Every run records the process executing it in the tag `creditline/process`
(host, pid, start time; see `creditline.liveness`). `reap_dead_runs` finds in-flight runs whose
process is gone from this host, marks them FAILED with a message saying so, frees their pool slots,
sets the round's MLflow runs KILLED, and returns one line per thing it cleaned up. It is called by
`creditline run` before each round, by the round sensor on every tick, and Dagster's run monitoring
reaches the same verdict through `pipelines.run_launcher`.
"""

from __future__ import annotations

import dagster as dg

from creditline.liveness import ProcessId, is_alive, this_process
from resources.lineage import PROCESS_TAG, REAPED_TAG

PARTITION_TAG = "dagster/partition"
POOLS = ("gpu",)
LIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, *LIVE]


def process_tags() -> dict[str, str]:
    """The tag that names this process as the one executing a run."""
    return {PROCESS_TAG: str(this_process())}


def run_process(run: dg.DagsterRun) -> ProcessId | None:
    text = run.tags.get(PROCESS_TAG)
    if text is None:
        return None
    try:
        return ProcessId.parse(text)
    except ValueError:
        return None


def run_is_dead(run: dg.DagsterRun) -> bool:
    """True only when the run's recorded process is known to be gone (never for an untagged run)."""
    process = run_process(run)
    return process is not None and is_alive(process) is False


def describe_run(run: dg.DagsterRun) -> str:
    where = run.tags.get(PARTITION_TAG, "no partition")
    process = run_process(run)
    return f"dagster run {run.run_id[:8]} ({run.job_name} {where}" + (
        f", {process.describe()})" if process else ")"
    )


def reap_dead_runs(instance: dg.DagsterInstance, data_root: str | None = None) -> list[str]:
    """Mark dead runs FAILED, free their slots and close their MLflow runs KILLED; say what was done."""
    lines = []
    for run in instance.get_runs(dg.RunsFilter(statuses=LIVE)):
        if not run_is_dead(run):
            continue
        message = f"its process ({run_process(run).describe()}) is gone: killed or crashed mid-run"
        instance.add_run_tags(run.run_id, {REAPED_TAG: "true"})
        instance.report_run_failed(run, message=f"creditline: marked failed, {message}")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        lines.append(f"cleaned up {describe_run(run)}: marked failed, {message}; its pool slots freed")
        if data_root is not None and (closed := _close_tracking(run, data_root)):
            lines.append(
                f"  and set its MLflow run{'s' if len(closed) > 1 else ''} {', '.join(closed)} KILLED"
            )
    lines += free_stale_slots(instance)
    return lines


def _slot_holders(instance: dg.DagsterInstance) -> list[tuple[str, str, dg.DagsterRun | None]]:
    """(pool, run id, run) for every claimed slot of our pools (an unconfigured pool has none)."""
    return [
        (pool, run_id, instance.get_run_by_id(run_id))
        for pool in POOLS
        for run_id in sorted(instance.event_log_storage.get_concurrency_info(pool).active_run_ids)
    ]


def free_stale_slots(instance: dg.DagsterInstance) -> list[str]:
    """Free pool slots still claimed by runs that are no longer in flight."""
    lines = []
    for pool, run_id, run in _slot_holders(instance):
        if run is None or run.status not in IN_FLIGHT:
            instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            lines.append(f"freed the {pool!r} pool slot of finished dagster run {run_id[:8]}")
    return lines


def leftover_problems(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(kind, detail) of what dead processes left in the instance: in-flight runs whose process is gone
    ("dead_run") and pool slots claimed by a run that is dead or no longer in flight ("held_slot")."""
    found = []
    for run in instance.get_runs(dg.RunsFilter(statuses=LIVE)):
        if run_is_dead(run):
            found.append(("dead_run", f"{describe_run(run)} is {run.status.value} but its process is gone"))
    for pool, run_id, run in _slot_holders(instance):
        if run is None or run.status not in IN_FLIGHT or run_is_dead(run):
            holder = describe_run(run) if run else f"run {run_id[:8]} (no such run)"
            found.append(("held_slot", f"pool {pool!r} slot held by {holder}, which is dead or over"))
    return found


def waits_for_slot(instance: dg.DagsterInstance, process: str) -> bool:
    """True when an in-flight run executed by `process` (its `creditline/process` tag) has a step waiting
    for a slot of one of our pools."""
    runs = {
        run.run_id for run in instance.get_runs(dg.RunsFilter(tags={PROCESS_TAG: process}, statuses=LIVE))
    }
    return any(runs & instance.event_log_storage.get_concurrency_info(pool).pending_run_ids for pool in POOLS)


def pool_holders(instance: dg.DagsterInstance) -> list[str]:
    """Who holds each pool's slots now, for a person waiting on them."""
    return [
        f"pool {pool!r} is held by " + (describe_run(run) if run else f"run {run_id[:8]}")
        for pool, run_id, run in _slot_holders(instance)
    ]


def close_round_tracking(data_root: str, experiment: str, round_: int, status: str) -> list[str]:
    """Close the round's and the experiment's MLflow runs that are still RUNNING; return their ids."""
    from creditline.store.rounds import EXPERIMENT_RUN_ROUND, tracking_run_id
    from resources import deployed_resources

    resources = deployed_resources(data_root)
    store, tracker = resources["lineage"].store(), resources["tracker"]
    closed = []
    for key in (round_, EXPERIMENT_RUN_ROUND):
        run_id = tracking_run_id(store, experiment, key)
        if run_id is not None and tracker.status(run_id) == "RUNNING":
            tracker.close(run_id, status)
            closed.append(run_id[:8])
    return closed


def _close_tracking(run: dg.DagsterRun, data_root: str) -> list[str]:
    """Set the MLflow runs of the dead run's round KILLED; return their ids."""
    from assets.partitions import parse_round_key

    try:
        experiment, round_ = parse_round_key(run.tags.get(PARTITION_TAG, ""))
    except ValueError:
        return []
    return close_round_tracking(data_root, experiment, round_, "KILLED")
