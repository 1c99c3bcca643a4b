"""What every round asset does at its boundary: read verified inputs, validate, write, record, report.

A stage's lineage reads, and its records, are bursts of DuckDB calls that may share one connection
(`LineageStore.session`), which keeps the catalog locked against other processes while it is open. So the
split: `lookup_artifact`, `recorded_output`, `record_table` and `record_run` touch only the catalog (inside a
session); `read_checked`, `reusable`, `write_table`, `round_run` and `log_round` (files, hashing, schema
validation, MLflow) run outside any session. So a stage opens the catalog twice: once for its reads, once for
its records.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import dagster as dg
import pandas as pd

from creditline.config import ExperimentConfig
from creditline.faults import failpoint
from creditline.store import (
    ArtifactRecord,
    FileRecord,
    RunRecord,
    check_on_disk,
    read_parquet,
    write_parquet_atomic,
)
from creditline.store.errors import ChangedInputError
from creditline.store.files import set_aside
from creditline.store.lineage import FINGERPRINT
from creditline.store.rounds import round_commits
from resources import LineageResource, TrackerResource
from resources.tracker import SERIES_MARK
from schemas import SCHEMAS, validate


def lookup_artifact(
    lineage: LineageResource, experiment: str, round_: int, kind: str, variant: str = ""
) -> ArtifactRecord:
    """The recorded artifact (a lineage read; its bytes are fetched from object storage only if missing
    here)."""
    store = lineage.store()
    record = store.artifact(experiment, round_, kind, variant)
    if record is None:
        raise FileNotFoundError(
            f"{experiment} round {round_}: no {kind!r} artifact (variant {variant!r}) recorded"
        )
    return store.ensure_local(record)


def read_checked(record: ArtifactRecord) -> pd.DataFrame:
    """A recorded table, checked before use: a file changed since it was recorded is refused.

    The quick check (`check_on_disk(quick=True)`): a file with the fingerprint its writer took when it hashed
    the bytes is trusted (the round tables' blocking checks re-hash them once more, `verify` re-hashes
    everything); any other is re-hashed."""
    if problem := check_on_disk(record, quick=True):
        raise ChangedInputError(problem.detail)
    return read_parquet(record.path)


def read_artifact(lineage: LineageResource, experiment: str, round_: int, kind: str, variant: str = ""):
    """(table, record): `lookup_artifact` then `read_checked`."""
    record = lookup_artifact(lineage, experiment, round_, kind, variant)
    return read_checked(record), record


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
    file must still exist; its bytes are checked by `reusable`, after the session (a stage passes the record
    through it before reusing it), by the blocking checks and by every reader.
    """
    return matching_output(lineage.store().artifact(experiment, round_, kind, variant), parents, meta)


def matching_output(
    record: ArtifactRecord | None, parents: Sequence[tuple[str, str]], meta: Mapping | None = None
) -> ArtifactRecord | None:
    """`record` (read before, in the stage's lineage session) if it was recorded from exactly these parents
    and `meta` facts and its file still exists, else None: `recorded_output` without the lineage read."""
    if record is None or set(record.parents) != {tuple(p) for p in parents}:
        return None
    if any(record.meta.get(k) != v for k, v in (meta or {}).items()) or not os.path.exists(record.path):
        return None
    return record


def reusable(lineage: LineageResource, record: ArtifactRecord | None) -> ArtifactRecord | None:
    """`record` (a `recorded_output`) if its bytes are still those recorded, checked outside any lineage
    session.

    Of a round not yet committed, an output that no longer matches its record (truncated, edited) is set aside
    (renamed beside itself and kept, `files.set_aside`), said in one line, and None returned: the stage
    regenerates it, as after a kill. A committed round's output is never regenerated silently: it is returned
    as it is, and its readers, the blocking checks and `verify` refuse or report it.
    """
    if record is None or (problem := check_on_disk(record, quick=True)) is None:
        return record
    store = lineage.store()
    if record.round in round_commits(store, record.experiment):
        return record
    aside = set_aside(record.path)
    print(
        f"set aside {aside}: {problem.detail}; round {record.round} is not committed, so it is regenerated",
        flush=True,
    )
    return None


def write_table(
    lineage: LineageResource,
    frame: pd.DataFrame,
    *,
    table: str,
    experiment: str,
    round_: int,
    variant: str = "",
) -> FileRecord:
    """Validate against the table's schema and write it atomically to its place (not yet recorded)."""
    frame = validate(SCHEMAS[table], frame, table)
    return write_parquet_atomic(frame, lineage.table_path(experiment, round_, table, variant))


def record_table(
    context: dg.AssetExecutionContext | dg.OpExecutionContext,
    lineage: LineageResource,
    written: FileRecord,
    *,
    kind: str,
    experiment: str,
    round_: int,
    variant: str = "",
    parents: Sequence[tuple[str, str]] = (),
    meta: dict | None = None,
) -> ArtifactRecord:
    """Record a table `write_table` wrote, with the fingerprint its writer took (a lineage write only)."""
    on_disk = {FINGERPRINT: written.fingerprint} if written.fingerprint is not None else {}
    record = lineage.store().record_artifact(
        ArtifactRecord(
            experiment=experiment,
            round=round_,
            kind=kind,
            variant=variant,
            path=written.path,
            content_hash=written.content_hash,
            rows=written.rows,
            meta={**(meta or {}), **on_disk},
            dagster_run_id=context.run_id,
        ),
        parents,
    )
    failpoint(f"after:{record.kind}")
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
    """Validate, write and record in one call (`write_table`, then `record_table`)."""
    written = write_table(lineage, frame, table=table, experiment=experiment, round_=round_, variant=variant)
    return record_table(
        context,
        lineage,
        written,
        kind=kind or table,
        experiment=experiment,
        round_=round_,
        variant=variant,
        parents=parents,
        meta=meta,
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


def round_run(
    lineage: LineageResource, tracker: TrackerResource, config: ExperimentConfig, round_: int
) -> str:
    """The round's MLflow run, created on first use (outside any lineage session: it talks to MLflow)."""
    return tracker.round_run(lineage.store(), config.name, round_, config.to_dict())


def record_run(
    context,
    lineage: LineageResource,
    config: ExperimentConfig,
    asset: str,
    version: str,
    round_: int,
    run_id: str,
) -> None:
    """Link this Dagster run's `asset` to the round's MLflow run in DuckDB: a lineage write, for the stage's
    records session (before `log_round` logs to that run)."""
    lineage.store().record_run(
        RunRecord(context.run_id, config.name, round_, asset, run_id, version, config.to_dict())
    )


def log_round(
    context,
    tracker: TrackerResource,
    asset: str,
    run_id: str,
    record: ArtifactRecord,
    metrics: dict[str, float],
    artifacts: list[str] | None = None,
    series: list[dict[str, float]] | None = None,
) -> None:
    """Add an asset's metrics (and per-update `series`) to its round's MLflow run (`round_run`), in one batch.

    Metrics already on the run (logged by an attempt that was killed later) are not logged twice.
    """
    logged = tracker.logged_keys(run_id)
    columns = (
        {}
        if not series or any(key.startswith(f"{asset}{SERIES_MARK}") for key in logged)
        else {f"{asset}{SERIES_MARK}{k}": [float(row[k]) for row in series] for k in series[0]}
    )
    tracker.log(
        run_id,
        metrics={f"{asset}/{k}": v for k, v in metrics.items() if f"{asset}/{k}" not in logged},
        tags={f"dagster_run_id.{asset}": context.run_id, f"data_version.{asset}": record.content_hash},
        artifacts=artifacts,
        series=columns,
    )
    failpoint(f"mlflow:{asset}")
