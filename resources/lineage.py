"""`LineageResource`: where a round's files live and the DuckDB catalog that records them.

Layout under the data root:

    <data_root>/lineage.duckdb                         the catalog (creditline.store.LineageStore), unless the
                                                       deployment puts it on Postgres (`catalog`)
    <data_root>/<experiment>/r000/policy/              the initial policy (built-in, or a copy's path is
                                                       recorded)
    <data_root>/<experiment>/rNNN/<table>.parquet      round N's tables
    <data_root>/<experiment>/rNNN/policy/              round N's checkpoint
    <data_root>/<experiment>/rNNN/rescore/<version>/   re-scored tables for another rubric version

An artifact's variant (a re-scored rubric version) is the name of its sub-folder, so a table's path
follows from (experiment, round, table, variant) alone.
"""

from __future__ import annotations

import functools
from pathlib import Path

import dagster as dg

from creditline.config import ExperimentConfig, read_registered
from creditline.liveness import this_process
from creditline.store import LineageStore
from creditline.store.data_root import catalog_target, open_store, store_at

PROCESS_TAG = "creditline/process"
"""Run tag naming the process that executes the run (`creditline.liveness.ProcessId`)."""
REAPED_TAG = "creditline/reaped"
"""Run tag set to "true" on a run failed because its process was gone (`pipelines.reaper`)."""


def name_run_worker(instance: dg.DagsterInstance, run_id: str, *, worker: bool = False) -> None:
    """Tag the run with this process as the one executing it, where `worker` says this process is the run's
    worker, or where the stored run names no process or only its parent's.

    The stored run decides, not a step's copy: the multiprocess executor hands each step the run as it was
    when the run started. A re-executed run (the UI's Re-execute, the run-retry daemon) starts with its
    parent's tags, this one and `creditline/reaped` among them: it would name the parent's worker, gone or
    busy elsewhere, and be failed as dead, and a later failure of its own would be taken for a kill. Both
    are replaced."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return
    parent = instance.get_run_by_id(run.parent_run_id) if run.parent_run_id else None
    inherited = {key for key in (PROCESS_TAG, REAPED_TAG) if parent and key in run.tags
                 and parent.tags.get(key) == run.tags[key]}  # fmt: skip
    tags = {}
    if worker or PROCESS_TAG not in run.tags or PROCESS_TAG in inherited:
        tags[PROCESS_TAG] = str(this_process())
    if REAPED_TAG in inherited:
        tags[REAPED_TAG] = "false"
    if any(run.tags.get(key) != value for key, value in tags.items()):
        instance.add_run_tags(run_id, tags)


class LineageResource(dg.ConfigurableResource):
    data_root: str
    catalog: str = ""
    """A `postgresql://` URI (the server profile's `[lineage] catalog`); empty:
    `<data_root>/lineage.duckdb`."""
    storage_uri: str = ""
    """An fsspec URI every recorded artifact is published under before its record (`[storage] uri`); empty:
    none."""
    storage_options_json: str = "{}"
    """The filesystem's options as JSON (`[storage] options`)."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Name this process as the run's worker, so that a killed worker can be told from a slow one,
        unless a process is named already: by `creditline run`, or by the multiprocess executor of
        `pipelines.executors`, whose steps set this resource up in processes of their own. A re-executed run
        is looked at again (its tags start as its parent's)."""
        run = context.dagster_run
        if run is None or context.instance is None:
            return
        if PROCESS_TAG not in run.tags or run.parent_run_id is not None:
            name_run_worker(context.instance, run.run_id)

    @property
    def root(self) -> Path:
        return Path(self.data_root)

    @property
    def catalog_target(self) -> str:
        return catalog_target(self.data_root, self.catalog)

    def store(self) -> LineageStore:
        return open_store(self.data_root, self.catalog, self.storage_uri, self.storage_options_json)

    def round_dir(self, experiment: str, round_: int) -> Path:
        return self.root / experiment / f"r{round_:03d}"

    def table_path(
        self, experiment: str, round_: int, table: str, rescore_version: str | None = None
    ) -> Path:
        folder = self.round_dir(experiment, round_)
        if rescore_version:
            folder = folder / "rescore" / rescore_version
        return folder / f"{table}.parquet"

    def checkpoint_dir(self, experiment: str, round_: int) -> Path:
        return self.round_dir(experiment, round_) / "policy"

    def experiment(self, name: str) -> ExperimentConfig:
        """The registered config of `name` (read once per process: a registered config never changes)."""
        return _registered_config(self.catalog_target, name)


@functools.lru_cache(maxsize=64)
def _registered_config(catalog: str, name: str) -> ExperimentConfig:
    """A failed lookup is not cached: an experiment registered later is found."""
    stored = store_at(catalog).experiment_config(name)
    if stored is None:
        raise ValueError(
            f"experiment {name!r} is not registered in {catalog}; "
            "start it with `creditline run --experiment NAME` (or register its config) first"
        )
    return read_registered(stored)  # its values checked, none of its code run
