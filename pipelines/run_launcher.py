"""The run launcher that lets Dagster's run monitoring see a dead run worker.

Dagster's `DefaultRunLauncher` starts run workers as local processes but cannot tell whether one is
still alive, so run monitoring never fails a run whose worker was killed. This launcher answers the
health check from the process recorded in the run's `creditline/process` tag: on this host, a
vanished process means FAILED (and the run is tagged `creditline/reaped`, so the round sensor retries
it), and run monitoring marks the run failed (and the concurrency daemon frees its slots) within one
poll interval. `pipelines/instance.py` configures it.
"""

from __future__ import annotations

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
        process = run_process(run)
        if process is None:  # not started executing yet: the worker has not tagged the run
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "no creditline/process tag yet")
        alive = is_alive(process)
        if alive is False:  # tagged as reaped, so the round sensor knows to retry it
            if self._instance is not None:
                self._instance.add_run_tags(run.run_id, {REAPED_TAG: "true"})
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker {process.describe()} is gone")
        if alive is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"run worker on another host ({process.host})")
        return CheckRunHealthResult(WorkerStatus.RUNNING)
