"""The Definitions: round and re-score assets, their jobs, the round sensor, resources bound to the data root.

The deployment (`creditline.config.deployment`) chooses the stores behind the resources and the executor of
every job: the jobs name none of their own, so a deployment file switches them without a code change.
"""

from __future__ import annotations

import dagster as dg

from assets import RESCORE, RESCORE_ASSETS, ROUND_ASSETS, ROUND_CHECKS, ROUNDS
from creditline.config.deployment import DagsterSettings, Deployment, load_deployment
from pipelines.sensors import round_failure_sensor, round_sensor
from resources import default_data_root, deployed_resources

ROUND_JOB = "round"
RESCORE_JOB = "rescore"

round_job = dg.define_asset_job(
    ROUND_JOB,
    selection=dg.AssetSelection.groups("round"),
    partitions_def=ROUNDS,
    description="One RL round: rollouts → scores → advantages → checkpoint → evaluation.",
)

rescore_job = dg.define_asset_job(
    RESCORE_JOB,
    selection=dg.AssetSelection.groups("rescore"),
    partitions_def=RESCORE,
    description="Re-score one round's stored rollouts with another rubric version; never feeds training.",
)


def make_definitions(data_root: str | None = None, deployment: Deployment | None = None) -> dg.Definitions:
    deployment = deployment or load_deployment()
    return dg.Definitions(
        assets=[*ROUND_ASSETS, *RESCORE_ASSETS],
        asset_checks=ROUND_CHECKS,
        jobs=[round_job, rescore_job],
        sensors=[round_sensor, round_failure_sensor],
        resources=deployed_resources(data_root or default_data_root(), deployment),
        executor=executor_for(deployment.dagster),
    )


def executor_for(settings: DagsterSettings) -> dg.ExecutorDefinition:
    """The executor a deployment names; Celery's and Kubernetes' come from their own packages, imported only
    then."""
    if settings.executor == "multiprocess":
        # each step forks from a server that has imported the pipeline once (torch, transformers, Dagster,
        # MLflow): ~6 s of imports per step otherwise, 13 steps a round
        start = {"forkserver": {"preload_modules": ["pipelines.definitions"]}}
        return dg.multiprocess_executor.configured(
            {"max_concurrent": settings.max_concurrent, "start_method": start}
        )
    if settings.executor == "celery":
        from dagster_celery import celery_executor  # pip install dagster-celery

        return celery_executor
    if settings.executor == "k8s":
        from dagster_k8s import k8s_job_executor  # pip install dagster-k8s

        return k8s_job_executor
    return dg.in_process_executor


defs = make_definitions()
