"""Where a deployment's stores live and how its steps run: one TOML, chosen by `$CREDITLINE_DEPLOYMENT`.

Without the variable the deployment is the local profile: every store is a file under the data root
(DuckDB catalog, MLflow sqlite, the Dagster instance's sqlite), steps run in the launching process, one GPU.
A deployment file switches them to servers users already run (docs/deployment.md), without touching an
experiment's config. The same experiment gives the same rounds on either (checkpoints hash alike, measured by
bench/server_profile.py), except that training on several processes sums gradients in another order
(the same parameters to ~1e-7, not the same bytes):

    [dagster]
    postgres_url = "postgresql://creditline@db:5432/dagster"   # the instance's runs, events, schedules
    executor = "multiprocess"                                   # in_process | multiprocess | celery | k8s
    max_concurrent = 4                                          # multiprocess: steps at once
    gpus = 2                                                # the "gpu" pool's size

    [lineage]
    catalog = "postgresql://creditline@db:5432/lineage"     # DuckDB attaches it (postgres extension)

    [tracking]
    uri = "http://mlflow:5000"

    [training]
    processes = 2                                           # torchrun ranks per training step
    sharding = "fsdp"                                       # replicated | fsdp (blocks split across ranks)

    [generation]
    endpoints = ["http://gen-0:8000", "http://gen-1:8000"]  # `vllm serve` replicas, data parallel
    model = "policy"                                        # the name they serve (--served-model-name)
    tensor_parallel_size = 2                                # vLLM in the step's process: GPUs per engine

    [storage]
    uri = "s3://bucket/creditline"                          # every artifact published here before its record
    options = {endpoint_url = "http://minio:9000"}          # fsspec options; credentials from the environment

Every field is optional. A typo or a value of the wrong type is refused naming the file and the field.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from creditline.errors import CreditlineError

DEPLOYMENT_ENV = "CREDITLINE_DEPLOYMENT"
EXECUTORS = ("in_process", "multiprocess", "celery", "k8s")
SHARDINGS = ("replicated", "fsdp")
"""`creditline.train.distributed.SHARDINGS` (not imported: reading a deployment must not import torch)."""


@dataclass(frozen=True)
class DagsterSettings:
    postgres_url: str = ""
    """The Dagster instance's storage (runs, event log, schedules) on Postgres; empty: sqlite files in
    DAGSTER_HOME."""
    executor: str = "in_process"
    """How a run's steps execute: in the run's process, one process each, Celery workers or Kubernetes
    jobs."""
    max_concurrent: int = 0
    """multiprocess: steps running at once; 0: one per CPU."""
    gpus: int = 1
    """Size of the "gpu" pool (rollouts, reward model, training, evaluation): how many such steps run at once.
    A concurrency limit only: nothing assigns each step its own device (set CUDA_VISIBLE_DEVICES per
    worker)."""
    max_concurrent_runs: int = 4
    """Runs the instance's run queue lets start at once."""


@dataclass(frozen=True)
class Deployment:
    source: str = "local"
    """The deployment file this was read from, or "local"."""
    dagster: DagsterSettings = field(default_factory=DagsterSettings)
    catalog: str = ""
    """[lineage] catalog: a `postgresql://` URI; empty: `<data_root>/lineage.duckdb`."""
    tracking_uri: str = ""
    """[tracking] uri: an MLflow tracking server; empty: `sqlite:///<data_root>/mlflow.db`."""
    train_processes: int = 1
    """[training] processes: torchrun ranks that train one checkpoint; 1 trains in the step's own process."""
    train_sharding: str = "replicated"
    """[training] sharding: "replicated" (every rank holds the whole model) or "fsdp" (each transformer
    block's parameters, gradients and optimiser moments split across the ranks:
    `creditline.train.distributed`)."""
    generation_endpoints: tuple[str, ...] = ()
    """[generation] endpoints: base URLs of OpenAI-compatible servers (`vllm serve` with
    VLLM_SERVER_DEV_MODE=1, or `creditline serve`) that generate every round's rollouts and evaluations as
    data-parallel replicas, reloading each round's checkpoint (`creditline.engines.endpoints`); empty: the
    experiment's own engine."""
    generation_model: str = "policy"
    """[generation] model: the model name the replicas serve."""
    tensor_parallel_size: int = 0
    """[generation] tensor_parallel_size: GPUs an in-process vLLM engine spans on these machines (the
    experiment's `rollouts.tensor_parallel_size` otherwise); 0: the experiment's."""
    storage_uri: str = ""
    """[storage] uri: an fsspec URI every recorded artifact is published under (`creditline.store.objects`);
    empty: the data root only."""
    storage_options: dict = field(default_factory=dict)
    """[storage] options: the filesystem's options (`endpoint_url` for an S3-compatible server)."""

    @property
    def profile(self) -> str:
        return "local" if self.source == "local" else "server"


class DeploymentError(CreditlineError, ValueError):
    """A deployment file that cannot be used: names the file and the field."""


_SECTIONS: dict[str, dict[str, str]] = {
    "dagster": {f.name: f.name for f in fields(DagsterSettings)},
    "lineage": {"catalog": "catalog"},
    "tracking": {"uri": "tracking_uri"},
    "training": {"processes": "train_processes", "sharding": "train_sharding"},
    "generation": {
        "endpoints": "generation_endpoints",
        "model": "generation_model",
        "tensor_parallel_size": "tensor_parallel_size",
    },
    "storage": {"uri": "storage_uri", "options": "storage_options"},
}


def load_deployment(path: str | os.PathLike[str] | None = None) -> Deployment:
    """The deployment in `path`, else in `$CREDITLINE_DEPLOYMENT`, else the local profile."""
    path = path or os.environ.get(DEPLOYMENT_ENV)
    if not path:
        return Deployment()
    source = str(Path(path).resolve())
    try:
        raw = tomllib.loads(Path(source).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DeploymentError(f"deployment {source}: cannot be read: {error}") from error
    values: dict[str, Any] = {}
    dagster: dict[str, Any] = {}
    for section, body in raw.items():
        if section not in _SECTIONS or not isinstance(body, dict):
            raise DeploymentError(
                f"deployment {source}: unknown section [{section}] "
                f"(known: {', '.join(f'[{s}]' for s in _SECTIONS)})"
            )
        for key, value in body.items():
            if key not in _SECTIONS[section]:
                raise DeploymentError(
                    f"deployment {source}: [{section}] has no field {key!r} "
                    f"(known: {', '.join(_SECTIONS[section])})"
                )
            (dagster if section == "dagster" else values)[_SECTIONS[section][key]] = value
    if isinstance(values.get("generation_endpoints"), list):
        values["generation_endpoints"] = tuple(values["generation_endpoints"])
    deployment = Deployment(source=source, dagster=DagsterSettings(**dagster), **values)
    _check(deployment)
    return deployment


def _check(deployment: Deployment) -> None:
    def fail(where: str, problem: str) -> None:
        raise DeploymentError(f"deployment {deployment.source}: {where} {problem}")

    for where, value in (
        ("[dagster] postgres_url", deployment.dagster.postgres_url),
        ("[dagster] executor", deployment.dagster.executor),
        ("[lineage] catalog", deployment.catalog),
        ("[tracking] uri", deployment.tracking_uri),
        ("[storage] uri", deployment.storage_uri),
        ("[generation] model", deployment.generation_model),
    ):
        if not isinstance(value, str):
            fail(where, f"must be a string, not {value!r}")
    for where, number, low in (
        ("[dagster] max_concurrent", deployment.dagster.max_concurrent, 0),
        ("[dagster] gpus", deployment.dagster.gpus, 1),
        ("[dagster] max_concurrent_runs", deployment.dagster.max_concurrent_runs, 1),
        ("[training] processes", deployment.train_processes, 1),
        ("[generation] tensor_parallel_size", deployment.tensor_parallel_size, 0),
    ):
        if not isinstance(number, int) or isinstance(number, bool) or number < low:
            fail(where, f"must be a whole number ≥ {low}, not {number!r}")
    if deployment.storage_uri and not deployment.catalog:
        fail(
            "[storage] uri",
            "needs [lineage] catalog on Postgres: a DuckDB file would stay locked for every upload, "
            "and workers on other machines could not reach it",
        )
    endpoints = deployment.generation_endpoints
    if not isinstance(endpoints, tuple) or not all(
        isinstance(url, str) and url.startswith(("http://", "https://")) for url in endpoints
    ):
        fail("[generation] endpoints", f"must be a list of http(s):// URLs, not {endpoints!r}")
    if len(set(endpoints)) != len(endpoints):
        fail("[generation] endpoints", "names a replica twice")
    if deployment.train_sharding not in SHARDINGS:
        fail("[training] sharding", f"{deployment.train_sharding!r} is not one of {', '.join(SHARDINGS)}")
    if deployment.train_sharding == "fsdp" and deployment.train_processes < 2:
        fail("[training] sharding", "fsdp splits the model across [training] processes: set processes ≥ 2")
    if not isinstance(deployment.storage_options, dict):
        fail("[storage] options", f"must be a table, not {deployment.storage_options!r}")
    if deployment.dagster.executor not in EXECUTORS:
        fail("[dagster] executor", f"{deployment.dagster.executor!r} is not one of {', '.join(EXECUTORS)}")
    for where, url in (
        ("[dagster] postgres_url", deployment.dagster.postgres_url),
        ("[lineage] catalog", deployment.catalog),
    ):
        if url and not url.startswith(("postgresql://", "postgres://")):
            fail(where, f"must be a postgresql:// URI, not {redact(url)!r}")


def redact(uri: str) -> str:
    """`uri` with any password replaced by ***, for messages and logs."""
    scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest:
        return uri
    credentials, at, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}@{host}"
