"""Dead runs are reclaimed: marked failed, pool slots freed, and Dagster's run monitoring agrees."""

import threading
import time

import dagster as dg

from creditline.config.deployment import DagsterSettings
from creditline.liveness import ProcessId, hostname, this_process
from pipelines.definitions import ROUND_JOB, make_definitions
from pipelines.instance import dagster_home, dagster_yaml
from pipelines.reaper import PROCESS_TAG, REAPED_TAG, pool_holders, reap_dead_runs
from pipelines.run_launcher import CreditlineRunLauncher

DEAD = str(ProcessId(hostname(), 2**22 + 11, 1))  # no such pid on this host


def _started_run(instance, tmp_path, process: str | None, partition: str = "x.r001"):
    job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
    tags = {"dagster/partition": partition, **({PROCESS_TAG: process} if process else {})}
    run = instance.create_run_for_job(job, tags=tags)
    instance.report_engine_event("started", run)
    instance.handle_run_event(run.run_id, dg.DagsterEvent("PIPELINE_START", job_name=run.job_name))
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
        runs = {name: _started_run(instance, tmp_path, process) for name, process in
                [("dead", DEAD), ("alive", str(this_process())), ("elsewhere", "other-host:1:1"), ("untagged", None)]}  # fmt: skip
        status = {name: launcher.check_run_worker_health(run).status.value for name, run in runs.items()}
        reaped = {name for name, run in runs.items() if REAPED_TAG in instance.get_run_by_id(run.run_id).tags}
    assert status == {"dead": "FAILED", "alive": "RUNNING", "elsewhere": "UNKNOWN", "untagged": "UNKNOWN"}
    assert reaped == {"dead"}  # the round sensor will retry it


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
