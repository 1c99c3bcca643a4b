"""The persistent Dagster instance under the data root, shared by `creditline run` and `make ui`.

DAGSTER_HOME is `<data_root>/dagster_home`; its `dagster.yaml` limits the `gpu` pool (rollouts,
training and evaluation) to one step at a time and frees the slots of runs that were cancelled.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from creditline.store import write_bytes_atomic

DAGSTER_YAML = """\
# Written by creditline (pipelines/instance.py). GPU-heavy assets share the pool "gpu" of size 1.
concurrency:
  pools:
    default_limit: 1
    granularity: op
  runs:
    max_concurrent_runs: 4
run_monitoring:
  enabled: true
  free_slots_after_run_end_seconds: 30
telemetry:
  enabled: false
"""


def dagster_home(data_root: str | Path) -> Path:
    home = Path(data_root) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        write_bytes_atomic(DAGSTER_YAML.encode(), config)
    return home


def get_instance(data_root: str | Path) -> dg.DagsterInstance:
    os.environ["DAGSTER_HOME"] = str(dagster_home(data_root))
    return dg.DagsterInstance.get()
