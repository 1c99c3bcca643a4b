"""What every round asset does at its boundary: read verified inputs, validate, write, record, report."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
from collections.abc import Sequence
from types import ModuleType

import dagster as dg
import pandas as pd

from creditline.config import ExperimentConfig
from creditline.store import ArtifactRecord, RunRecord, check_on_disk, read_parquet, write_parquet_atomic
from resources import LineageResource, TrackerResource
from schemas import SCHEMAS, validate


def code_version(*modules: ModuleType) -> str:
    """A hash of the source of the core modules (and packages' submodules) an asset runs.

    Editing any of them gives a new code version, so Dagster marks the asset and what depends on it stale.
    """
    digest = hashlib.sha256()
    for module in modules:
        members = [module]
        if hasattr(module, "__path__"):  # a package: include every submodule
            names = sorted(
                info.name for info in pkgutil.walk_packages(module.__path__, module.__name__ + ".")
            )
            members += [importlib.import_module(name) for name in names]
        for member in members:
            digest.update(inspect.getsource(member).encode())
    return digest.hexdigest()[:12]


def read_artifact(lineage: LineageResource, experiment: str, round_: int, kind: str, variant: str = ""):
    """A recorded table, re-hashed before use: a file changed since it was recorded is refused."""
    record = lineage.store().artifact(experiment, round_, kind, variant)
    if record is None:
        raise FileNotFoundError(
            f"{experiment} round {round_}: no {kind!r} artifact (variant {variant!r}) recorded"
        )
    if problem := check_on_disk(record):
        raise ValueError(problem.detail)
    return read_parquet(record.path), record


def persist_table(
    context: dg.AssetExecutionContext | dg.OpExecutionContext,
    lineage: LineageResource,
    frame: pd.DataFrame,
    *,
    table: str,
    experiment: str,
    round_: int,
    kind: str | None = None,
    variant: str = "",
    parents: Sequence[tuple[str, str]] = (),
    meta: dict | None = None,
) -> ArtifactRecord:
    """Validate against the table's schema, write it atomically to its place, record it in lineage."""
    frame = validate(SCHEMAS[table], frame, table)
    written = write_parquet_atomic(frame, lineage.table_path(experiment, round_, table, variant))
    return lineage.store().record_artifact(
        ArtifactRecord(
            experiment=experiment,
            round=round_,
            kind=kind or table,
            variant=variant,
            path=written.path,
            content_hash=written.content_hash,
            rows=written.rows,
            meta=meta or {},
            dagster_run_id=context.run_id,
        ),
        parents,
    )


def materialized(record: ArtifactRecord, asset_key: str | None = None, **metadata) -> dg.MaterializeResult:
    """The Dagster result: the content hash as data version, plus what a person wants to see."""
    shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metadata.items()}
    rows = {"rows": record.rows} if record.rows is not None else {}
    return dg.MaterializeResult(
        asset_key=asset_key,
        data_version=dg.DataVersion(record.content_hash),
        metadata={
            "content_hash": record.content_hash,
            "path": dg.MetadataValue.path(record.path),
            **rows,
            **shown,
        },
    )


def log_round(
    context,
    lineage: LineageResource,
    tracker: TrackerResource,
    config: ExperimentConfig,
    asset: str,
    version: str,
    record: ArtifactRecord,
    metrics: dict[str, float],
    artifacts: list[str] | None = None,
) -> str:
    """Add an asset's metrics and data version to its round's MLflow run and link the run in DuckDB."""
    params = config.to_dict()
    run_id = tracker.round_run(record.experiment, record.round, params)
    tracker.log(
        run_id,
        metrics={f"{asset}/{k}": v for k, v in metrics.items()},
        tags={f"dagster_run_id.{asset}": context.run_id, f"data_version.{asset}": record.content_hash},
        artifacts=artifacts,
    )
    lineage.store().record_run(
        RunRecord(context.run_id, record.experiment, record.round, asset, run_id, version, params)
    )
    return run_id
