"""What every round asset does at its boundary: read verified inputs, validate, write, record, report."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import dagster as dg
import pandas as pd

from creditline.config import ExperimentConfig
from creditline.faults import failpoint
from creditline.store import ArtifactRecord, RunRecord, check_on_disk, read_parquet, write_parquet_atomic
from resources import LineageResource, TrackerResource
from resources.tracker import SERIES_MARK
from schemas import SCHEMAS, validate


def read_artifact(lineage: LineageResource, experiment: str, round_: int, kind: str, variant: str = ""):
    """A recorded table, checked before use: a file changed since it was recorded is refused.

    The quick check (`check_on_disk(quick=True)`): a file with the size and mtime recorded with it is trusted
    (its blocking check re-hashed it after it was written); any other is re-hashed."""
    record = lineage.store().artifact(experiment, round_, kind, variant)
    if record is None:
        raise FileNotFoundError(
            f"{experiment} round {round_}: no {kind!r} artifact (variant {variant!r}) recorded"
        )
    if problem := check_on_disk(record, quick=True):
        raise ValueError(problem.detail)
    return read_parquet(record.path), record


def recorded_output(
    lineage: LineageResource,
    experiment: str,
    round_: int,
    kind: str,
    parents: Sequence[tuple[str, str]],
    variant: str = "",
    meta: Mapping | None = None,
) -> ArtifactRecord | None:
    """What an earlier attempt of this stage recorded from the same inputs, or None: recompute.

    A round killed half-way is completed by running it again; a stage whose output is already recorded
    with exactly these parents (and these `meta` facts, e.g. the rubric version) is not redone. The
    file must still exist; its hash is checked by the blocking checks and by every reader.
    """
    record = lineage.store().artifact(experiment, round_, kind, variant)
    if record is None or set(record.parents) != {tuple(p) for p in parents}:
        return None
    if any(record.meta.get(k) != v for k, v in (meta or {}).items()) or not os.path.exists(record.path):
        return None
    return record


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
    record = lineage.store().record_artifact(
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
    failpoint(f"after:{record.kind}")
    return record


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
    series: list[dict[str, float]] | None = None,
) -> str:
    """Add an asset's metrics (and per-update `series`) to its round's MLflow run; link the run in DuckDB.

    Metrics already on the run (logged by an attempt that was killed later) are not logged twice.
    """
    store = lineage.store()
    params = config.to_dict()
    run_id = tracker.round_run(store, record.experiment, record.round, params)
    logged = tracker.logged_keys(run_id)
    tracker.log(
        run_id,
        metrics={f"{asset}/{k}": v for k, v in metrics.items() if f"{asset}/{k}" not in logged},
        tags={f"dagster_run_id.{asset}": context.run_id, f"data_version.{asset}": record.content_hash},
        artifacts=artifacts,
    )
    if series and not any(key.startswith(f"{asset}{SERIES_MARK}") for key in logged):
        tracker.log_series(run_id, series, asset)
    failpoint(f"mlflow:{asset}")
    store.record_run(
        RunRecord(context.run_id, record.experiment, record.round, asset, run_id, version, params)
    )
    return run_id
