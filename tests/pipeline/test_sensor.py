from datetime import datetime

import dagster as dg
import pytest

from creditline.config import from_dict
from creditline.credit import rubrics
from pipelines.cron_window import in_window
from pipelines.definitions import ROUND_JOB, make_definitions
from pipelines.sensors import next_rounds, round_sensor
from resources import LineageResource

TINY = {"rollouts": {"tasks_per_round": 2, "group_size": 2}, "train": {"epochs": 1, "minibatches": 1},
        "eval": {"num_tasks": 2}, "rounds": 2}  # fmt: skip


@pytest.mark.parametrize(
    "expression, now, expected",
    [
        (None, datetime(2026, 1, 1, 12, 0), True),
        ("* 22-23,0-5 * * *", datetime(2026, 1, 1, 23, 30), True),
        ("* 22-23,0-5 * * *", datetime(2026, 1, 1, 3, 0), True),
        ("* 22-23,0-5 * * *", datetime(2026, 1, 1, 12, 0), False),
        ("*/15 * * * *", datetime(2026, 1, 1, 12, 30), True),
        ("*/15 * * * *", datetime(2026, 1, 1, 12, 31), False),
        ("* * * * 6,0", datetime(2026, 11, 21, 9, 0), True),  # a Saturday
        ("* * * * 1-5", datetime(2026, 11, 21, 9, 0), False),
        ("* 22-3 * * *", datetime(2026, 1, 1, 1, 0), True),  # a range that wraps midnight
    ],
)
def test_cron_window(expression, now, expected):
    assert in_window(expression, now) is expected


def test_cron_window_refuses_bad_expressions():
    with pytest.raises(ValueError, match="5 fields"):
        in_window("* * *", datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="outside 0..23"):
        in_window("* 25 * * *", datetime(2026, 1, 1))


def test_sensor_starts_advances_and_stops_each_experiment_on_its_own(tmp_path):
    lineage = LineageResource(data_root=str(tmp_path))
    for name in ("alpha", "beta"):
        lineage.store().register_experiment(name, from_dict({**TINY, "name": name}).to_dict())
    with dg.instance_for_test() as instance:
        requests, _, _ = next_rounds(instance, lineage)
        assert sorted(r.partition_key for r in requests) == ["alpha.r001", "beta.r001"]
        assert {r.run_key for r in requests} == {r.partition_key for r in requests}  # idempotent run keys

        result = round_sensor(dg.build_sensor_context(instance=instance, resources={"lineage": lineage}))
        assert sorted(result.dynamic_partitions_requests[0].partition_keys) == ["alpha.r001", "beta.r001"]

        job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
        instance.add_dynamic_partitions("rounds", ["alpha.r001", "beta.r001"])
        assert job.execute_in_process(instance=instance, partition_key="alpha.r001").success
        requests, waiting, _ = next_rounds(instance, lineage)
        # alpha committed round 1 → round 2; beta's round 1 was added but never ran → requested again
        assert sorted(r.partition_key for r in requests) == ["alpha.r002", "beta.r001"]

        instance.add_dynamic_partitions("rounds", ["alpha.r002"])
        assert job.execute_in_process(instance=instance, partition_key="alpha.r002").success
        requests, waiting, _ = next_rounds(instance, lineage)
        assert [r.partition_key for r in requests] == ["beta.r001"]
        assert any("alpha: all 2 rounds done" in w for w in waiting)
        assert {e.round for e in lineage.store().evaluations("beta")} == set()  # beta untouched by alpha


def test_sensor_waits_for_a_failed_round_but_retries_a_killed_one(tmp_path, monkeypatch):
    """A round that failed on its own waits for a person; one whose process died is requested again."""
    from creditline.liveness import ProcessId
    from pipelines.reaper import PROCESS_TAG

    lineage = LineageResource(data_root=str(tmp_path))
    lineage.store().register_experiment("gamma", from_dict({**TINY, "name": "gamma"}).to_dict())
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("rounds", ["gamma.r001"])
        job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)

        def broken(steps):  # a rubric that fails: a step failure, which a person must look at
            raise ValueError("broken rubric")

        bad = rubrics.Rubric("env", (rubrics.Criterion("env_reward", broken, "step"),))
        with monkeypatch.context() as patch:
            patch.setitem(rubrics.RUBRICS, "env", bad)
            assert not job.execute_in_process(instance=instance, partition_key="gamma.r001",
                                              raise_on_error=False, tags={"creditline/experiment": "gamma"}).success  # fmt: skip
        requests, waiting, _ = next_rounds(instance, lineage)
        assert requests == [] and any("round 1 failed" in w for w in waiting)

        from creditline.liveness import hostname

        dead = str(ProcessId(hostname(), 999999, 1))  # a pid that does not exist on this host
        killed = instance.create_run_for_job(job, tags={"dagster/partition": "gamma.r001", PROCESS_TAG: dead,
                                                       "creditline/experiment": "gamma"})  # fmt: skip
        instance.handle_new_event(_engine_event(killed.run_id))
        requests, waiting, cleaned = next_rounds(instance, lineage)
        assert any("cleaned up dagster run" in line for line in cleaned)
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        assert [(r.partition_key, r.run_key) for r in requests] == [("gamma.r001", "gamma.r001/attempt-3")]

        from pipelines.sensors import _was_killed

        died = instance.create_run_for_job(job, tags={"dagster/partition": "gamma.r001"})
        instance.handle_new_event(_engine_event(died.run_id))
        instance.report_run_failed(
            died
        )  # as Dagster does when a run worker exits unexpectedly: no step failed
        assert _was_killed(instance, instance.get_run_by_id(died.run_id))


def _engine_event(run_id: str):
    """The RUN_START event that moves a run to STARTED."""
    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._core.events.log import EventLogEntry

    event = DagsterEvent(DagsterEventType.RUN_START.value, job_name="round")
    return EventLogEntry(error_info=None, level="INFO", user_message="", run_id=run_id, timestamp=0.0,
                         dagster_event=event)  # fmt: skip


def test_sensor_waits_outside_its_window(tmp_path, monkeypatch):
    monkeypatch.setenv("CREDITLINE_ROUND_WINDOW", "0 0 1 1 *")  # only one minute a year
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance, resources={"lineage": LineageResource(data_root=str(tmp_path))}
        )
        result = round_sensor(context)
    assert isinstance(result, dg.SkipReason) and "outside the round window" in result.skip_message


def test_a_failed_round_gets_its_mlflow_runs_closed_failed(tmp_path):
    from pipelines.sensors import round_failure_sensor
    from resources import TrackerResource

    lineage = LineageResource(data_root=str(tmp_path))
    config = from_dict({**TINY, "name": "delta"}).to_dict()
    lineage.store().register_experiment("delta", config)
    tracker = TrackerResource(data_root=str(tmp_path))
    child = tracker.round_run(lineage.store(), "delta", 1, config)
    parent = tracker.experiment_run(lineage.store(), "delta", config)
    assert tracker.status(child) == tracker.status(parent) == "RUNNING"
    with dg.instance_for_test() as instance:
        job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
        run = instance.create_run_for_job(job, tags={"dagster/partition": "delta.r001"})
        instance.report_run_failed(run)
        failure = instance.get_records_for_run(run.run_id).records[-1].event_log_entry.dagster_event
        context = dg.build_run_status_sensor_context(
            sensor_name="round_failure_sensor", dagster_event=failure, dagster_instance=instance,
            dagster_run=instance.get_run_by_id(run.run_id), resources={"lineage": lineage},
        ).for_run_failure()  # fmt: skip
        round_failure_sensor(context)
    assert tracker.status(child) == tracker.status(parent) == "FAILED"


def test_sensor_leaves_an_experiment_alone_while_a_run_holds_its_lease(tmp_path):
    from creditline.store.leases import acquire_lease, release_lease

    lineage = LineageResource(data_root=str(tmp_path))
    lineage.store().register_experiment("held", from_dict({**TINY, "name": "held"}).to_dict())
    lease = acquire_lease(lineage.store(), "held")
    with dg.instance_for_test() as instance:
        requests, waiting, _ = next_rounds(instance, lineage)
        assert requests == [] and any(
            w.startswith("held: being run by `creditline run` (pid ") for w in waiting
        )
        release_lease(lineage.store(), lease)
        requests, _, _ = next_rounds(instance, lineage)
        assert [r.partition_key for r in requests] == ["held.r001"]


def test_before_requesting_a_round_the_sensor_clears_what_dead_writers_left(tmp_path):
    """A worker SIGKILLed while it wrote the initial policy leaves a temp folder; the retry must not keep it
    (verify would report it for ever). A live writer's temp folder, and other experiments', are left."""
    import os
    import subprocess
    import sys

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)  # fmt: skip
    lineage = LineageResource(data_root=str(tmp_path))
    lineage.store().register_experiment("delta", from_dict({**TINY, "name": "delta"}).to_dict())
    killed = tmp_path / "delta" / "r000" / f".policy.tmp-{dead}-1-0"
    live = tmp_path / "delta" / "r001" / f".episodes.parquet.tmp-{os.getpid()}-1-0"
    elsewhere = tmp_path / "unregistered" / "r001" / f".policy.tmp-{dead}-1-0"
    for folder in (killed, elsewhere):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    live.parent.mkdir(parents=True)
    live.write_bytes(b"PAR1")
    with dg.instance_for_test() as instance:
        requests, _, cleaned = next_rounds(instance, lineage)
    assert [r.partition_key for r in requests] == ["delta.r001"]
    assert not killed.exists() and live.exists() and elsewhere.exists()
    assert cleaned == [
        f"removed {killed}: left by a writer that died (no process with pid {dead} is running)"
    ]
