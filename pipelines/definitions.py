"""The Definitions: round and re-score assets, their jobs, the round sensor, resources bound to the data root.

The deployment (`creditline.config.deployment`) chooses the stores behind the resources and the executor of
every job: the jobs name none of their own, so a deployment file switches them without a code change.
"""

from __future__ import annotations

import dagster as dg

from assets import RESCORE, RESCORE_ASSETS, ROUND_ASSETS, ROUND_CHECKS, ROUNDS
from creditline.config.deployment import Deployment, load_deployment
from pipelines.executors import multiprocess_executor
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
        executor=executor_for(deployment),
    )


def executor_for(deployment: Deployment) -> dg.ExecutorDefinition:
    """The executor a deployment names; Celery's and Kubernetes' come from their own packages, imported only
    then."""
    settings = deployment.dagster
    if settings.executor == "multiprocess":
        start = {"forkserver": {"preload_modules": step_preload(deployment)}}
        return multiprocess_executor.configured(
            {"max_concurrent": settings.max_concurrent, "start_method": start}
        )
    if settings.executor == "celery":
        from dagster_celery import celery_executor  # pip install dagster-celery

        return celery_executor
    if settings.executor == "k8s":
        from dagster_k8s import k8s_job_executor  # pip install dagster-k8s

        return k8s_job_executor
    return dg.in_process_executor


def step_preload(deployment: Deployment) -> list[str]:
    """What the multiprocess executor's forkserver imports once per run, so that every step process forks
    with it imported: the definitions (Dagster), the round's stages (torch, transformers), MLflow,
    `pipelines.step_warmup` (what opening the stores and checking a table import and set up), and the
    clients of the deployment's own stores (dagster-postgres, the object store's fsspec filesystem).

    The definitions alone import none of the rest, so that the CLI and the webserver start fast. A step that
    imported them itself would pay ~7 s of CPU for torch, transformers and MLflow, ~1.2 s for dagster-postgres
    and ~0.7 s for s3fs (AMD EPYC, 2026-11-27), 13 steps a round."""
    modules = ["pipelines.definitions", "creditline.round", "mlflow", "pipelines.step_warmup"]
    if deployment.dagster.postgres_url:
        modules.append("dagster_postgres")
    if deployment.storage.uri:
        from fsspec.registry import known_implementations

        from creditline.store.objects import uri_protocol

        if implementation := known_implementations.get(uri_protocol(deployment.storage.uri)):
            modules.append(implementation["class"].rsplit(".", 1)[0])
    return modules


defs = make_definitions()
