"""Dead runs are reclaimed: marked failed, pool slots freed, and Dagster's run monitoring agrees."""

import datetime
import logging
import threading
import time

import dagster as dg
import pytest

from creditline.config.deployment import DagsterSettings
from creditline.liveness import ProcessId, hostname, this_process
from pipelines.definitions import ROUND_JOB, make_definitions
from pipelines.instance import dagster_home, dagster_yaml
from pipelines.reaper import PROCESS_TAG, REAPED_TAG, pool_holders, reap_dead_runs
from pipelines.run_launcher import CreditlineRunLauncher

DEAD = str(ProcessId(hostname(), 2**22 + 11, 1))  # no such pid on this host


def _started_run(instance, tmp_path, process: str | None, partition: str = "x.r001", ago_s: float = 0.0):
    """A round's run, started `ago_s` seconds ago by the worker that `process` names (None: not named yet)."""
    job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
    tags = {"dagster/partition": partition, **({PROCESS_TAG: process} if process else {})}
    run = instance.create_run_for_job(job, tags=tags)
    instance.report_engine_event("started", run)
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ago_s)
    instance.handle_run_event(run.run_id, dg.DagsterEvent("PIPELINE_START", job_name=run.job_name), started)
    return instance.get_run_by_id(run.run_id)


def test_a_dead_run_is_failed_and_its_slot_freed_a_live_one_is_left_alone(tmp_path):
    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        dead = _started_run(instance, tmp_path, DEAD)
        alive = _started_run(instance, tmp_path, str(this_process()), "x.r002")
        untagged = _started_run(instance, tmp_path, None, "x.r003")
        assert instance.event_log_storage.claim_concurrency_slot("gpu", dead.run_id, "rollouts").is_claimed
        assert [h for h in pool_holders(instance) if dead.run_id[:8] in h]
        lines = reap_dead_runs(instance)
        assert len(lines) == 1 and dead.run_id[:8] in lines[0] and "marked failed" in lines[0]
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        assert instance.get_run_by_id(untagged.run_id).status == dg.DagsterRunStatus.STARTED  # unknown: kept
        assert pool_holders(instance) == []
        assert reap_dead_runs(instance) == []  # idempotent


def test_the_run_launcher_reports_worker_health_from_the_process_tag(tmp_path):
    launcher = CreditlineRunLauncher()
    assert launcher.supports_check_run_worker_health
    with dg.instance_for_test() as instance:
        launcher.register_instance(instance)
        runs = _runs_of_each_kind(instance, tmp_path)
        status = {name: launcher.check_run_worker_health(run).status.value for name, run in runs.items()}
        reaped = {name for name, run in runs.items() if REAPED_TAG in instance.get_run_by_id(run.run_id).tags}
    assert status == {"dead": "FAILED", "alive": "RUNNING", "elsewhere": "RUNNING", "untagged": "RUNNING",
                      "untagged for 200 s": "UNKNOWN"}  # fmt: skip
    assert reaped == {"dead"}  # the round sensor will retry it


def _runs_of_each_kind(instance, tmp_path) -> dict[str, dg.DagsterRun]:
    """Started runs whose worker is dead, alive, on another host, not named yet, and not named 200 s after
    the run started (Dagster's start timeout is 180 s)."""
    kinds = [("dead", DEAD, 0), ("alive", str(this_process()), 0), ("elsewhere", "other-host:1:1", 0),
             ("untagged", None, 0), ("untagged for 200 s", None, 200)]  # fmt: skip
    return {
        name: _started_run(instance, tmp_path, process, f"x.r00{i + 1}", ago)
        for i, (name, process, ago) in enumerate(kinds)
    }


def test_dagster_run_monitoring_fails_only_runs_whose_worker_is_gone_or_never_named_itself(tmp_path):
    """Dagster's own monitoring pass over each run, with our launcher: it fails a started run on any answer but
    RUNNING. A worker slow to reach its first step (a loaded machine) once had its round failed under it."""
    from dagster._daemon.monitoring.run_monitoring import monitor_started_run

    launcher = {"module": "pipelines.run_launcher", "class": "CreditlineRunLauncher"}
    overrides = {"run_launcher": launcher, "run_monitoring": {"enabled": True, "max_resume_run_attempts": 0}}
    with dg.instance_for_test(overrides=overrides) as instance:
        assert isinstance(instance.run_launcher, CreditlineRunLauncher)
        runs = _runs_of_each_kind(instance, tmp_path)
        for run in runs.values():
            record = instance.get_run_record_by_id(run.run_id)
            monitor_started_run(instance, None, record, logging.getLogger("run monitoring"))  # type: ignore[arg-type]
        status = {name: instance.get_run_by_id(run.run_id).status.value for name, run in runs.items()}
    assert status == {"dead": "FAILURE", "alive": "STARTED", "elsewhere": "STARTED", "untagged": "STARTED",
                      "untagged for 200 s": "FAILURE"}  # fmt: skip


def test_the_instance_monitors_runs_with_our_launcher(tmp_path):
    home = dagster_home(tmp_path)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert isinstance(instance.run_launcher, CreditlineRunLauncher)
        assert (
            instance.run_monitoring_enabled
            and instance.run_monitoring_settings["poll_interval_seconds"] == 15
        )
    finally:
        instance.dispose()
    old = "# Written by creditline (pipelines/instance.py). an older version\nconcurrency: {}\n"
    (home / "dagster.yaml").write_text(old)
    dagster_home(tmp_path)
    assert (home / "dagster.yaml").read_text() == dagster_yaml(DagsterSettings())  # ours, rewritten
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster_home(tmp_path)
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"  # the user's, kept


def test_run_says_what_it_waits_for_and_goes_on_when_the_slot_frees(tmp_path, capsys):
    from pipelines.round_runner import wait_for_pools

    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        other = _started_run(instance, tmp_path, str(this_process()), "other.r001")
        instance.event_log_storage.claim_concurrency_slot("gpu", other.run_id, "checkpoint")
        releaser = threading.Timer(
            0.5, instance.event_log_storage.free_concurrency_slots_for_run, [other.run_id]
        )
        releaser.start()
        start = time.monotonic()
        wait_for_pools(instance, str(tmp_path), poll_s=0.1)
        assert time.monotonic() - start >= 0.4
    out = capsys.readouterr().out
    assert f"waiting: pool 'gpu' is held by dagster run {other.run_id[:8]} (round other.r001" in out


def test_run_refuses_while_a_live_process_runs_a_round_of_the_experiment(tmp_path):
    import pytest

    from creditline.store.leases import LeaseHeldError
    from pipelines.round_runner import refuse_if_in_flight

    with dg.instance_for_test() as instance:
        live = _started_run(instance, tmp_path, str(this_process()), "busy.r001")
        instance.add_run_tags(live.run_id, {"creditline/experiment": "busy"})
        dead = _started_run(instance, tmp_path, DEAD, "idle.r001")
        instance.add_run_tags(dead.run_id, {"creditline/experiment": "idle"})
        with pytest.raises(
            LeaseHeldError, match=f"experiment 'busy' has a round in flight: dagster run {live.run_id[:8]}"
        ):
            refuse_if_in_flight(instance, "busy")
        refuse_if_in_flight(instance, "idle")  # its only run is dead: nothing to wait for


def test_a_multiprocess_run_is_not_taken_for_dead_when_its_first_step_process_ends(tmp_path):
    """Under the multiprocess executor each step has a process of its own, which ends with the step. The run is
    named after its worker (the process that starts the steps' processes and lives as long as the run), so a
    reaper that ticks after the first step's process has ended finds nothing to reap, no later step names itself
    instead, and the run succeeds."""
    from tests.pipeline import multiprocess_job

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = dg.execute_job(dg.reconstructable(multiprocess_job.three_steps), instance)
        run = instance.get_run_by_id(result.run_id)
        steps = {
            key.path[-1]: event.asset_materialization.metadata
            for key in (dg.AssetKey("first"), dg.AssetKey("second"), dg.AssetKey("third"))
            for event in [instance.get_latest_materialization_event(key)]
        }
    pids = {steps[name]["pid"].value for name in steps} | {this_process().pid}
    assert len(pids) == 4  # a process for each step and the worker
    assert steps["second"]["reaped"].value == ""
    assert run.status == dg.DagsterRunStatus.SUCCESS and REAPED_TAG not in run.tags
    assert run.tags[PROCESS_TAG] == str(this_process())  # the run worker: here, the test's process


@pytest.mark.parametrize("job", ["three_steps", "three_steps_in_process"])
def test_a_reexecuted_run_names_its_own_worker_not_the_one_its_parent_had(tmp_path, job):
    """Dagster's re-execution (the UI's Re-execute, the run-retry daemon) copies the parent run's tags: its
    worker, gone, and `creditline/reaped`. The new run names its own worker, so a reaper that ticks while it runs
    finds nothing to reap, and it is not marked as killed."""
    from dagster._core.execution.api import execute_run

    from tests.pipeline import multiprocess_job

    recon = dg.reconstructable(getattr(multiprocess_job, job))
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        definition = recon.get_definition()
        parent = instance.create_run_for_job(definition, tags={PROCESS_TAG: DEAD, REAPED_TAG: "true"})
        lineage = {"dagster/parent_run_id": parent.run_id, "dagster/root_run_id": parent.run_id}
        child = instance.create_run_for_job(
            definition,
            tags={**parent.tags, **lineage},
            parent_run_id=parent.run_id,
            root_run_id=parent.run_id,
        )
        execute_run(recon, child, instance)
        run = instance.get_run_by_id(child.run_id)
        reaped = instance.get_latest_materialization_event(
            dg.AssetKey("second")
        ).asset_materialization.metadata
    assert reaped["reaped"].value == ""
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags[PROCESS_TAG] == str(this_process()) and run.tags[REAPED_TAG] == "false"
