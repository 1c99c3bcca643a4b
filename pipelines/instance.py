"""The persistent Dagster instance under the data root, shared by `creditline run` and `make ui`.

DAGSTER_HOME is `<data_root>/dagster_home`; its `dagster.yaml` keeps the instance's storage there (or on the
deployment's Postgres), limits the `gpu` pool (rollouts, reward model, training and evaluation) to the
deployment's GPUs (one, locally), lets run monitoring fail a run whose worker process
died (`pipelines.run_launcher`) within 15 s, and frees the pool slots of ended runs after 10 s.
A `dagster.yaml` written by an older creditline is rewritten; one without our header line is the
user's and is left alone.

The instance's sqlite storages are created and migrated under the data root's first-start lock
(`creditline.store.first_start`), so two commands started at once on an empty root cannot stamp two schema
versions. A root already damaged that way (before the lock) is repaired on the next start: the storages'
tables were created whole by Dagster's `create_all`, so the head revision is the true one and the other
stamp is dropped, with one line saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import dagster as dg

from creditline.config.deployment import DagsterSettings, Deployment, load_deployment
from creditline.store import write_bytes_atomic
from creditline.store.first_start import first_start_lock

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
nux:
  enabled: false
"""


def dagster_yaml(settings: DagsterSettings) -> str:
    """The instance's configuration under a deployment's Dagster settings (Postgres storage when it names
    one).

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


SHARED_STORAGES = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")
"""The sqlite storages every process opens (and the first one creates): the ones a race can stamp twice."""


class InstanceDamagedError(RuntimeError):
    """A storage of the Dagster instance carries several schema stamps that no repair can settle."""


def _head_revision() -> str:
    """The newest schema revision of Dagster's sqlite storages (one alembic script for all of them)."""
    from alembic.script import ScriptDirectory
    from dagster._core.storage.runs.sqlite import sqlite_run_storage
    from dagster._core.storage.sql import get_alembic_config

    return ScriptDirectory.from_config(get_alembic_config(sqlite_run_storage.__file__)).as_revision_number(
        "head"
    )


def repair_schema_stamps(home: Path) -> list[str]:
    """Drop the extra `alembic_version` rows two racing first starts left; say what was repaired.

    Only a storage stamped with the head revision among others is repaired (its tables were created whole
    at the head); any other multi-stamped storage raises InstanceDamagedError naming the file.
    """
    import sqlite3

    lines = []
    for path in (home / name for name in SHARED_STORAGES):  # not the per-run event logs: one writer made each
        if not path.exists():
            continue
        with contextlib.closing(sqlite3.connect(path)) as con:
            try:
                stamps = sorted(row[0] for row in con.execute("SELECT version_num FROM alembic_version"))
            except sqlite3.DatabaseError:  # no stamp table (a per-run event log), or not ours to judge
                continue
            if len(stamps) <= 1:
                continue
            head = _head_revision()
            if head not in stamps:
                raise InstanceDamagedError(
                    f"Dagster storage {path} carries {len(stamps)} schema stamps ({', '.join(stamps)}), "
                    f"none of them the installed Dagster's {head}; move {home} aside and start again "
                    "(runs recorded there are lost to the UI; "
                    "the lineage catalog and MLflow keep every round)"
                )
            with con:
                con.execute("DELETE FROM alembic_version WHERE version_num <> ?", [head])
            lines.append(
                f"repaired {path}: two first starts had stamped it twice ({', '.join(stamps)}); "
                f"kept {head}, the revision its tables were created at"
            )
    return lines


def get_instance(data_root: str | Path) -> dg.DagsterInstance:
    """The data root's Dagster instance, its storages created (or repaired) by one process at a time."""
    home = dagster_home(data_root)
    os.environ["DAGSTER_HOME"] = str(home)
    with first_start_lock(data_root):
        for line in repair_schema_stamps(home):
            print(line, flush=True)
        return dg.DagsterInstance.get()  # builds (creates, migrates) every storage, inside the lock
