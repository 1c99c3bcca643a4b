"""The persistent Dagster instance under the data root, shared by `creditline run` and `make ui`.

DAGSTER_HOME is `<data_root>/dagster_home`; its `dagster.yaml` limits the `gpu` pool (rollouts,
training and evaluation) to one step at a time, lets run monitoring fail a run whose worker process
died (`pipelines.run_launcher`) within 15 s, and frees the pool slots of ended runs after 10 s.
A `dagster.yaml` written by an older creditline is rewritten; one without our header line is the
user's and is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from creditline.store import write_bytes_atomic

HEADER = "# Written by creditline (pipelines/instance.py)."
DAGSTER_YAML = f"""\
{HEADER} GPU-heavy assets share the pool "gpu" of size 1.
concurrency:
  pools:
    default_limit: 1
    granularity: op
  runs:
    max_concurrent_runs: 4
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


def dagster_home(data_root: str | Path) -> Path:
    home = Path(data_root) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    current = config.read_text() if config.exists() else None
    if current is None or (current.startswith(HEADER) and current != DAGSTER_YAML):
        write_bytes_atomic(DAGSTER_YAML.encode(), config)
    return home


def get_instance(data_root: str | Path) -> dg.DagsterInstance:
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_root))
    return dg.DagsterInstance.get()
