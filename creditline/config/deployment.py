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

Every field is optional. The file is checked like an experiment's config, on the same schema
(`creditline.config.schema`): each field's type is its rule, every problem is reported together, one line
each naming the file, the dotted field, the value (a password in it redacted) and what is allowed:

    deployment /etc/creditline/deployment.toml: dagster.gpus = 0: must be an integer ≥ 1
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, with_config

from creditline.config import TensorParallelSize
from creditline.config.schema import (
    TABLE,
    AllMatch,
    ConfigError,
    Int,
    Matches,
    Problem,
    Strings,
    Table,
    Text,
    validate,
)

DEPLOYMENT_ENV = "CREDITLINE_DEPLOYMENT"
Executor = Literal["in_process", "multiprocess", "celery", "k8s"]
Sharding = Literal["replicated", "fsdp"]
"""`creditline.train.distributed.SHARDINGS` (not imported: reading a deployment must not import torch)."""
PostgresUri = Annotated[str, Matches(re.compile(r"|postgres(ql)?://.*"), "a postgresql:// URI")]
"""Empty (the local file store), or a Postgres server's URI."""
Endpoints = Annotated[Strings, AllMatch(re.compile(r"https?://.+"), "a list of http(s):// URLs")]


@with_config(TABLE)
@dataclass(frozen=True)
class DagsterSettings:
    postgres_url: PostgresUri = ""
    """The Dagster instance's storage (runs, event log, schedules) on Postgres; empty: sqlite files in
    DAGSTER_HOME."""
    executor: Executor = "in_process"
    """How a run's steps execute: in the run's process, one process each, Celery workers or Kubernetes
    jobs."""
    max_concurrent: Annotated[Int, Field(ge=0)] = 0
    """multiprocess: steps running at once; 0: one per CPU."""
    gpus: Annotated[Int, Field(ge=1)] = 1
    """Size of the "gpu" pool (rollouts, reward model, training, evaluation): how many such steps run at once.
    A concurrency limit only: nothing assigns each step its own device (set CUDA_VISIBLE_DEVICES per
    worker)."""
    max_concurrent_runs: Annotated[Int, Field(ge=1)] = 4
    """Runs the instance's run queue lets start at once."""


@with_config(TABLE)
@dataclass(frozen=True)
class LineageSettings:
    catalog: PostgresUri = ""
    """The lineage catalog on Postgres; empty: `<data_root>/lineage.duckdb`."""


@with_config(TABLE)
@dataclass(frozen=True)
class TrackingSettings:
    uri: Text = ""
    """An MLflow tracking server; empty: `sqlite:///<data_root>/mlflow.db`."""


@with_config(TABLE)
@dataclass(frozen=True)
class TrainingSettings:
    processes: Annotated[Int, Field(ge=1)] = 1
    """torchrun ranks that train one checkpoint; 1 trains in the step's own process."""
    sharding: Sharding = "replicated"
    """"replicated" (every rank holds the whole model) or "fsdp" (each transformer block's parameters,
    gradients and optimiser moments split across the ranks: `creditline.train.distributed`)."""


@with_config(TABLE)
@dataclass(frozen=True)
class GenerationSettings:
    endpoints: Endpoints = ()
    """Base URLs of OpenAI-compatible servers (`vllm serve` with VLLM_SERVER_DEV_MODE=1, or `creditline
    serve`) that generate every round's rollouts and evaluations as data-parallel replicas, reloading each
    round's checkpoint (`creditline.engines.endpoints`); empty: the experiment's own engine."""
    model: Text = "policy"
    """The model name the replicas serve."""
    tensor_parallel_size: TensorParallelSize | None = None
    """GPUs an in-process vLLM engine spans on these machines, instead of the experiment's
    `rollouts.tensor_parallel_size` (the same rule: `creditline.config.TensorParallelSize`); absent: the
    experiment's."""


@with_config(TABLE)
@dataclass(frozen=True)
class StorageSettings:
    uri: Text = ""
    """An fsspec URI every recorded artifact is published under (`creditline.store.objects`); empty: the
    data root only."""
    options: Table = field(default_factory=dict)
    """The filesystem's options (`endpoint_url` for an S3-compatible server)."""


@with_config(TABLE)
@dataclass(frozen=True)
class Deployment:
    """A deployment file's tables, one dataclass each, as written."""

    dagster: DagsterSettings = field(default_factory=DagsterSettings)
    lineage: LineageSettings = field(default_factory=LineageSettings)
    tracking: TrackingSettings = field(default_factory=TrackingSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    source: str = field(default="local", init=False)
    """The deployment file this was read from, or "local" (not a key of the file: `load_deployment` sets
    it)."""

    @property
    def profile(self) -> str:
        return "local" if self.source == "local" else "server"


class DeploymentError(ConfigError):
    """A deployment file that cannot be used: each of its `problems` names the file and the field."""


def load_deployment(path: str | os.PathLike[str] | None = None) -> Deployment:
    """The deployment in `path`, else in `$CREDITLINE_DEPLOYMENT`, else the local profile."""
    path = path or os.environ.get(DEPLOYMENT_ENV)
    if not path:
        return Deployment()
    source = str(Path(path).resolve())
    try:
        raw = tomllib.loads(Path(source).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DeploymentError([f"deployment {source}: cannot be read: {error}"]) from error
    deployment, problems = validate(Deployment, raw)
    if deployment is not None:
        problems = relation_problems(deployment)
    if problems:
        raise DeploymentError(
            [Problem(p.path, redacted(p.value), p.allowed).line(f"deployment {source}") for p in problems]
        )
    assert deployment is not None
    object.__setattr__(deployment, "source", source)  # frozen, and not the file's to set: set once, here
    return deployment


def relation_problems(deployment: Deployment) -> list[Problem]:
    """What no single field's type says: object storage needs the catalog on Postgres, each replica is named
    once, fsdp needs ranks to shard across."""
    problems = []
    if deployment.storage.uri and not deployment.lineage.catalog:
        why = (
            "needs lineage.catalog on Postgres: a DuckDB file would stay locked for every upload, "
            "and workers on other machines could not reach it"
        )
        problems.append(Problem("storage.uri", deployment.storage.uri, why))
    endpoints = deployment.generation.endpoints
    if len(set(endpoints)) != len(endpoints):
        problems.append(Problem("generation.endpoints", endpoints, "names a replica twice"))
    if deployment.training.sharding == "fsdp" and deployment.training.processes < 2:
        why = "splits the model across training.processes: set processes ≥ 2"
        problems.append(Problem("training.sharding", "fsdp", why))
    return problems


def redacted(value: Any) -> Any:
    """`value` with the password of every URI in it replaced by ***, for messages."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item) for item in value]
    return value


def redact(uri: str) -> str:
    """`uri` with any password replaced by ***, for messages and logs."""
    scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest:
        return uri
    credentials, at, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}@{host}"
