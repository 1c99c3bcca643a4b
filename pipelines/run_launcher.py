"""The run launcher that lets Dagster's run monitoring see a dead run worker.

Dagster's `DefaultRunLauncher` starts run workers as local processes but cannot tell whether one is
still alive, so run monitoring never fails a run whose worker was killed. This launcher answers the
health check from the process recorded in the run's `creditline/process` tag: on this host, a
vanished process means FAILED (and the run is tagged `creditline/reaped`, so the round sensor retries
it), and run monitoring marks the run failed (and the concurrency daemon frees its slots) within one
poll interval. A worker that cannot be judged (on another host, or not tagged yet) is left running.
`pipelines/instance.py` configures it.
"""

from __future__ import annotations

import time

import dagster as dg
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.launcher.default_run_launcher import DefaultRunLauncher

from creditline.liveness import is_alive
from pipelines.reaper import REAPED_TAG, run_process


class CreditlineRunLauncher(DefaultRunLauncher):
    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        """FAILED only for a worker known to be gone. Dagster's run monitoring fails a started run on any
        answer but RUNNING or SUCCESS, UNKNOWN included, so a worker that cannot be judged is RUNNING, as
        without this check: one on another host, and one that has not named itself yet (under the in-process
        executor it does at its first step's set-up, under the multiprocess one as its executor starts; on a
        loaded machine either can be more than a poll interval after the run started) until the run has been
        started for as long as Dagster lets a run take to start."""
        process = run_process(run)
        if process is None:
            waited = self._seconds_since_start(run)  # None: nothing to tell by; a timeout of 0 is none
            if waited is None or not 0 < self._instance.run_monitoring_start_timeout_seconds <= waited:
                return CheckRunHealthResult(WorkerStatus.RUNNING, "its worker has not named itself yet")
            return CheckRunHealthResult(
                WorkerStatus.UNKNOWN, f"no process tag {waited:.0f} s after its start"
            )
        alive = is_alive(process)
        if alive is False:  # tagged as reaped, so the round sensor knows to retry it
            if self.has_instance:
                self._instance.add_run_tags(run.run_id, {REAPED_TAG: "true"})
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker {process.describe()} is gone")
        if alive is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker on another host ({process.host})")
        return CheckRunHealthResult(WorkerStatus.RUNNING)

    def _seconds_since_start(self, run: dg.DagsterRun) -> float | None:
        """Seconds since the run started (since it was created, where its storage keeps no start time)."""
        record = self._instance.get_run_record_by_id(run.run_id) if self.has_instance else None
        if record is None:
            return None
        started = record.start_time if record.start_time is not None else record.create_timestamp.timestamp()
        return time.time() - started
