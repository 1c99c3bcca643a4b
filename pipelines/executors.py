"""Dagster's multiprocess executor, naming the run's worker before the steps' processes start.

Every run records the process that executes it (the `creditline/process` tag, `pipelines/reaper.py`), so
that a killed run worker can be told from a slow one: the round sensor and run monitoring fail a run whose
process is gone. `LineageResource` names the process it is set up in, which under the multiprocess executor
is a step's own process. That process ends with its step, and until the next step was set up, a live run was
failed as dead, and each later step, holding a copy of the run taken before any step ran, saw no process
named and named itself in turn. This executor names the run worker, the process that starts the steps'
processes and outlives them, before the first step starts (whatever a re-executed run inherited from its
parent); the steps' resources then find it named and leave it. The configuration is Dagster's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.executor.base import Executor

from resources.lineage import name_run_worker

if TYPE_CHECKING:
    from dagster._core.execution.context.system import PlanOrchestrationContext
    from dagster._core.execution.plan.plan import ExecutionPlan
    from dagster._core.execution.retries import RetryMode
    from dagster._core.execution.step_dependency_config import StepDependencyConfig


class RunWorkerNamingExecutor(Executor):
    """`inner`, after naming this process (the run worker) as the run's."""

    def __init__(self, inner: Executor):
        self._inner = inner

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[dg.DagsterEvent]:
        name_run_worker(plan_context.instance, plan_context.run_id, worker=True)
        yield from self._inner.execute(plan_context, execution_plan)

    @property
    def retries(self) -> RetryMode:
        return self._inner.retries

    @property
    def step_dependency_config(self) -> StepDependencyConfig:
        return self._inner.step_dependency_config


def _create(init_context: dg.InitExecutorContext) -> Executor:
    create = dg.multiprocess_executor.executor_creation_fn
    assert create is not None  # Dagster's multiprocess executor is defined by its creation function
    return RunWorkerNamingExecutor(create(init_context))


multiprocess_executor = dg.ExecutorDefinition(
    name=dg.multiprocess_executor.name,
    config_schema=dg.multiprocess_executor.config_schema.as_field(),
    requirements=dg.multiprocess_executor.get_requirements,
    executor_creation_fn=_create,
    description=dg.multiprocess_executor.description,
)
"""Dagster's `multiprocess_executor` (its name, configuration and requirements), naming the run worker."""
