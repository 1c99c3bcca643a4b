"""The persistent Dagster instance under the data root, shared by `creditline run` and `make ui`.

DAGSTER_HOME is `<data_root>/dagster_home`; its `dagster.yaml` keeps the instance's storage there (or on the
deployment's Postgres), limits the `gpu` pool (rollouts, reward model, training and evaluation) to the
deployment's GPUs (one, locally), lets run monitoring fail a run whose worker process
died (`pipelines.run_launcher`) within 15 s, and frees the pool slots of ended runs after 10 s.
A `dagster.yaml` written by an older creditline is rewritten; one without our header line is the
user's and is left alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg

from creditline.deployment import DagsterSettings, Deployment, load_deployment
from creditline.store import write_bytes_atomic

HEADER = "# Written by creditline (pipelines/instance.py)."
_DAGSTER_YAML = f"""\
{HEADER} GPU-heavy assets share the pool "gpu" of size {{gpus}}.
{{storage}}concurrency:
  pools:
    default_limit: {{gpus}}
    granularity: op
  runs:
    max_concurrent_runs: {{max_concurrent_runs}}
run_launcher:
  module: pipelines.run_launcher
  class: CreditlineRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 15
  start_timeout_seconds: 180
  max_resume_run_attempts: 0
  free_slots_after_run_end_seconds: 10
telemetry:
  enabled: false
"""


def dagster_yaml(settings: DagsterSettings) -> str:
    """The instance's configuration under a deployment's Dagster settings (Postgres storage when it names one).

    dagster-postgres is written for psycopg2, while SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3:
    the URL names the driver.
    """
    url = settings.postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1).replace(
        "postgres://", "postgresql+psycopg2://", 1
    )
    storage = f"storage:\n  postgres:\n    postgres_url: {json.dumps(url)}\n" if settings.postgres_url else ""
    return _DAGSTER_YAML.format(
        storage=storage, gpus=settings.gpus, max_concurrent_runs=settings.max_concurrent_runs
    )


def dagster_home(data_root: str | Path, deployment: Deployment | None = None) -> Path:
    home = Path(data_root) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    wanted = dagster_yaml((deployment or load_deployment()).dagster)
    current = config.read_text() if config.exists() else None
    if current is None or (current.startswith(HEADER) and current != wanted):
        write_bytes_atomic(wanted.encode(), config)
    return home


def get_instance(data_root: str | Path) -> dg.DagsterInstance:
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_root))
    return dg.DagsterInstance.get()
