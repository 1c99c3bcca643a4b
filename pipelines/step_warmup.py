"""What every step process of the multiprocess executor would do first, done once in its forkserver instead.

The multiprocess executor forks each step's process from a forkserver that imports `step_preload`'s modules
(`pipelines.definitions`), this one among them. Importing this module does the rest of what a step process
otherwise did before its step's own work, each time:
- it opened the run's Dagster instance, whose storages, run launcher and coordinator are classes named by
  module in the instance's configuration (`$DAGSTER_HOME/dagster.yaml`, which the run worker sets before its
  executor starts the forkserver), and whose secrets loader and definitions-state storage are Dagster's
  defaults: all their modules are imported here (SQLAlchemy and alembic with them);
- it opened MLflow's tracking store (the embedded SQLite one, or a server's REST one), and its first query
  configured SQLAlchemy's mappers for MLflow's tables: both stores' modules are imported, and the mappers
  configured, here;
- its first schema check registered pandera's pandas backends and built the table's schema from its model:
  both done here, for every table.

In a step process of the tiny experiment on AMD EPYC (2026-11-29), opening the instance took 0.73 s of CPU,
MLflow's store 0.33 s and pandera's registration ~0.1 s, of ~1.6 s a step; with this module preloaded,
opening the two stores took 0.08 s and 0.04 s, and the round's processes together 25–28 s of CPU against
35–41 s (docs/deployment.md). `tests/pipeline/test_definitions.py` checks that opening the stores and
checking a table import nothing more.

Nothing here opens a file for writing, a database or a connection, and no thread is started: a forked process
must share none of them with its forkserver. Only the instance's configuration is read.
"""

from __future__ import annotations

import importlib
import os

import pandas as pd
import pandera.backends.register_checks  # noqa: F401  (what a table's first field check imports)
import pandera.pandas as pa
import sqlalchemy.orm
from dagster._core.instance.ref import InstanceRef

from schemas import SCHEMAS

INSTANCE_OPENING = (
    "dagster._core.instance.factory",
    "dagster._core.storage.migration.utils",
    "dagster._core.secrets.env_file",
    "dagster._core.storage.defs_state.blob_storage_state_storage",
    "upath.core",
    "upath.implementations.local",
)
"""What Dagster imports when it opens an instance, beyond the classes its configuration names: the factory,
the storages' migration checks, and the parts left to defaults (the secrets loader, the definitions-state
storage on a universal path)."""
TRACKING_STORES = (
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.tracking.sqlalchemy_workspace_store",
    "mlflow.store.workspace.utils",
    "mlflow.store.db.trace_analytics_prepopulation",
    "mlflow.store.tracking.rest_store",
)
"""MLflow's tracking stores for a database URI (the embedded store, a server's database), with what opening
one imports, and for a server's URL."""


def instance_modules(dagster_home: str) -> list[str]:
    """The modules of the classes the instance under `dagster_home` is built from (storages, launcher)."""
    ref = InstanceRef.from_dir(dagster_home)
    parts = (getattr(ref, field) for field in ref._fields)
    return [part.module_name for part in parts if hasattr(part, "module_name")]


def warm_up(dagster_home: str | None) -> None:
    """Import what opening the instance under `dagster_home` and MLflow's stores import, configure the
    SQLAlchemy mappers of the models imported, register pandera's backends for pandas tables and build the
    round's table schemas (pandera keeps each model's schema once built).

    A forkserver started by a process whose `$DAGSTER_HOME` is unset or names no folder skips the instance's
    configured classes: its steps import them, as they did before."""
    configured = instance_modules(dagster_home) if dagster_home and os.path.isdir(dagster_home) else []
    for module in [*configured, *INSTANCE_OPENING]:
        importlib.import_module(module)
    for module in TRACKING_STORES:
        importlib.import_module(module)
    sqlalchemy.orm.configure_mappers()
    pa.DataFrameSchema.register_default_backends(pd.DataFrame)
    for table in SCHEMAS.values():
        table.to_schema()


warm_up(os.environ.get("DAGSTER_HOME"))
