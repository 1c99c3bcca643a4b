"""A three-step job under the multiprocess executor, for tests/pipeline/test_reaper.py.

Each step runs in a process of its own, forked from the executor's forkserver, which imports only this module.
`first` sets up `LineageResource` (which names the run's worker when no process is named yet) and ends, and its
process with it. `second` does what the round sensor does on each tick while the run is in flight, between one
step's end and the next step's set-up (it sets up no `LineageResource` of its own): it reaps the runs whose worker
is gone and records what that found. `third` sets up `LineageResource` again, from the run as the executor handed
it to the step, which is the run as it was before any step started.
"""

import os

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


def three_steps() -> dg.JobDefinition:
    """The job, for `dg.reconstructable`: each step process builds it again from this module."""
    preload = {"start_method": {"forkserver": {"preload_modules": [__name__]}}}
    return dg.Definitions(
        assets=[first, second, third],
        jobs=[dg.define_asset_job("three_steps")],
        resources={"lineage": LineageResource(data_root=os.environ["CREDITLINE_DATA_ROOT"])},
        executor=multiprocess_executor.configured(preload),
    ).resolve_job_def("three_steps")
