"""A three-step job, for tests/pipeline/test_reaper.py: under the multiprocess executor and under the in-process one.

Under the multiprocess executor each step runs in a process of its own, forked from the executor's forkserver,
which imports only this module.
`first` sets up `LineageResource` (which names the run's worker when no process is named yet) and ends, and its
process with it. `second` does what the round sensor does on each tick while the run is in flight, between one
step's end and the next step's set-up (it sets up no `LineageResource` of its own): it reaps the runs whose worker
is gone and records what that found. `third` sets up `LineageResource` again, from the run as the executor handed
it to the step, which is the run as it was before any step started.
"""

import os
import tempfile

import dagster as dg

from pipelines.executors import multiprocess_executor
from pipelines.reaper import reap_dead_runs
from resources.lineage import LineageResource


@dg.asset
def first(lineage: LineageResource) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"pid": os.getpid()})


@dg.asset(deps=[first])
def second(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata={"pid": os.getpid(), "reaped": "\n".join(reap_dead_runs(context.instance))}
    )


@dg.asset(deps=[second])
def third(lineage: LineageResource) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"pid": os.getpid()})


def _job(executor: dg.ExecutorDefinition) -> dg.JobDefinition:
    # The steps write nothing under the data root. A fixed one, not an environment variable: Python starts one
    # forkserver per process, so every later test's steps would inherit the first test's environment.
    return dg.Definitions(
        assets=[first, second, third],
        jobs=[dg.define_asset_job("three_steps")],
        resources={"lineage": LineageResource(data_root=tempfile.gettempdir())},
        executor=executor,
    ).resolve_job_def("three_steps")


def three_steps() -> dg.JobDefinition:
    """The job under the multiprocess executor, for `dg.reconstructable`: each step process builds it again."""
    return _job(
        multiprocess_executor.configured({"start_method": {"forkserver": {"preload_modules": [__name__]}}})
    )


def three_steps_in_process() -> dg.JobDefinition:
    """The same job under the in-process executor (the default deployment's)."""
    return _job(dg.in_process_executor)
