"""The stage protocol: the crash-safe sequence every round asset runs, in one place.

A round asset is a declaration: the recorded artifacts it reads, the artifacts it records (tables and
folders, each with its lineage parents and facts), and its call into `creditline.round`. `Stage` runs the
sequence around that call:

    1. read         the inputs' records, in one lineage session              `with stage.reads():`
    2. declare      each output, looking up what an earlier attempt          `stage.table`, `stage.folder`
                    recorded under its key from exactly these parents
                    and facts
    3. resume       if every output was recorded so and its bytes are still  `stage.produce(compute)`
                    those recorded, reuse them; an uncommitted round's changed
                    file is set aside and the outputs computed again
    4. compute      the asset's own call (skipped on resume)
    5. write        tables validated against their schema and written
                    atomically; folders (written by the call) hashed
    6. record       the round's MLflow run if this stage found or created
                    it, every output in declared order, then the asset's
                    own records, then the link to the round's MLflow run,
                    in one lineage transaction
    7. log          metrics to the round's MLflow run, each key once          `stage.log`
    8. materialise  the content hash as Dagster's data version                `stage.materialized`

A process killed at any instant leaves all of step 6 recorded or none of it (on a Postgres catalog, where
each record is a transaction of its own, a prefix of it), and the next attempt of the stage resumes (all
outputs recorded and intact) or recomputes and records them all anew (records are upserts by key). The
fault tests kill it at each boundary (`tests/faults/test_kill_matrix.py`).

Lineage reads and records are bursts of DuckDB calls that share one connection (`LineageStore.session`),
which keeps the catalog locked against other processes while it is open; so the work itself (files,
hashing, schema checks, MLflow) runs outside both sessions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets.partitions import parse_round_key
from creditline import progress
from creditline.config import ExperimentConfig
from creditline.faults import failpoint
from creditline.store import (
    ArtifactRecord,
    FileRecord,
    RunRecord,
    check_on_disk,
    hashed_folder,
    read_parquet,
    write_parquet_atomic,
)
from creditline.store.errors import ChangedInputError
from creditline.store.files import set_aside
from creditline.store.lineage import FINGERPRINT, LineageStore
from creditline.store.rounds import round_commits
from resources import LineageResource, TrackerResource
from resources.tracker import SERIES_MARK
from schemas import SCHEMAS, validate


@dataclass
class Output:
    """One artifact a stage records: a table (validated against `schema`) or a folder its compute writes.

    `parents` are (content hash, relation); a parent may also be an earlier `Output` of the same stage
    (a training table `summarises` its checkpoint), whose hash is known once that output is recorded."""

    kind: str
    parents: Sequence[tuple[str | Output, str]]
    meta: Mapping[str, Any] = field(default_factory=dict)
    variant: str = ""
    schema: str | None = None
    """The table's schema name (`schemas.SCHEMAS`); None for a folder."""
    earlier: ArtifactRecord | None = None
    """What an earlier attempt recorded from exactly these parents and facts (set when declared)."""
    record: ArtifactRecord | None = None
    """The record this attempt reused or wrote (set by `Stage.produce`)."""
    value: pd.DataFrame | Path | None = None
    """The table, or the folder's path (set by `Stage.produce`)."""


Made = pd.DataFrame | Path | tuple[pd.DataFrame | Path, Mapping[str, Any]]
"""What a stage's compute returns per output kind: the table or folder, optionally with facts for its
record known only after computing."""


class Stage:
    """One round asset's execution: the protocol above, for the round (or `experiment`, `round_`) of
    `context`'s partition."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        lineage: LineageResource,
        tracker: TrackerResource | None,
        asset: str,
        version: str,
        experiment: str | None = None,
        round_: int | None = None,
    ):
        self.context, self.lineage, self.tracker = context, lineage, tracker
        self.asset, self.version = asset, version
        if experiment is None or round_ is None:
            experiment, round_ = parse_round_key(context.partition_key)
        self.experiment, self.round = experiment, round_
        self.outputs: list[Output] = []
        self._round_records: dict[tuple[str, str], ArtifactRecord] | None = None
        """(kind, variant) -> this round's record, inside `reads`."""
        self.run_id: str | None = None
        """The round's MLflow run (set when the outputs are recorded)."""
        self.resumed = False

    @cached_property
    def config(self) -> ExperimentConfig:
        return self.lineage.experiment(self.experiment)

    @cached_property
    def store(self) -> LineageStore:
        return self.lineage.store()

    # 1-2. reads and declarations, inside one lineage session

    @contextlib.contextmanager
    def reads(self) -> Iterator[Stage]:
        """The block for the stage's lineage reads (and output declarations): one catalog connection, and
        one query for the round's records, from which `recorded`, `input` and the declarations are answered
        inside it (the records as the block found them: nothing is recorded inside it)."""
        with self.store.session():
            self._round_records = {
                (record.kind, record.variant): record
                for record in self.store.artifacts(self.experiment, self.round)
            }
            try:
                yield self
            finally:
                self._round_records = None

    def recorded(self, kind: str, variant: str = "") -> ArtifactRecord | None:
        """This round's record of `kind` (and `variant`), or None."""
        if self._round_records is None:  # outside `reads`
            return self.store.artifact(self.experiment, self.round, kind, variant)
        return self._round_records.get((kind, variant))

    def input(self, kind: str, variant: str = "", round_: int | None = None) -> ArtifactRecord:
        """The recorded input `kind` of this round (or `round_`); a clear error when it is not recorded."""
        if round_ is not None and round_ != self.round:
            return lookup_artifact(self.store, self.experiment, round_, kind, variant)
        return local_record(
            self.store, self.recorded(kind, variant), self.experiment, self.round, kind, variant
        )

    def table(
        self,
        kind: str,
        parents: Sequence[tuple[str | Output, str]],
        meta: Mapping[str, Any] | None = None,
        variant: str = "",
        schema: str | None = None,
    ) -> Output:
        """Declare a table output (its schema: `kind` unless named) and look up what an earlier attempt
        recorded."""
        return self._declare(Output(kind, parents, meta or {}, variant, schema or kind))

    def folder(
        self, kind: str, parents: Sequence[tuple[str | Output, str]], meta: Mapping[str, Any] | None = None
    ) -> Output:
        """Declare a folder output (written by the compute) and look up what an earlier attempt recorded."""
        return self._declare(Output(kind, parents, meta or {}))

    def _declare(self, output: Output) -> Output:
        parents = _resolve(output.parents, lambda o: o.earlier)
        record = self.recorded(output.kind, output.variant)
        output.earlier = None if parents is None else matching_output(record, parents, output.meta)
        self.outputs.append(output)
        return output

    # 3-6. resume or compute, write, record

    def produce(
        self,
        compute: Callable[[], Mapping[str, Made]],
        also_record: Callable[[LineageStore], None] | None = None,
        link_run: bool = True,
    ) -> bool:
        """Reuse the declared outputs or compute, write and record them; then `also_record` (the asset's own
        records, e.g. branch links) and, with `link_run`, this asset's link to the round's MLflow run, in the
        same lineage session. Each output's `record` and `value` are set; returns True if resumed."""
        earlier = [reusable(self.store, o.earlier) for o in self.outputs]
        self.resumed = all(record is not None for record in earlier)
        written: list[tuple[Output, FileRecord | tuple[str, dict], Mapping[str, Any]]] = []
        if self.resumed:
            for output, record in zip(self.outputs, earlier, strict=True):
                output.record = record
                output.value = read_parquet(record.path) if output.schema else Path(record.path)
        else:
            with progress.stage(self.asset):
                made = compute()
            for output in self.outputs:
                value, facts = (
                    made[output.kind] if isinstance(made[output.kind], tuple) else (made[output.kind], {})
                )
                output.value = value
                if output.schema is not None:
                    written.append((output, self.write(value, output.schema, output.variant), facts))
                else:
                    written.append((output, hashed_folder(value), facts))
        unrecorded: list[str] = []  # the round's MLflow run, when this stage found or created it
        if link_run and self.tracker is not None:  # talks to MLflow: outside the session
            self.run_id = self.tracker.round_run(
                self.store, self.experiment, self.round, self.config.to_dict(), unrecorded
            )
        with self.store.session(atomic=True):  # the records only, committed together
            for run_id in unrecorded:
                self.run_id = self.tracker.record_round_run(self.store, self.experiment, self.round, run_id)
            for output, files, facts in written:
                output.record = self._record(output, files, facts)
            if also_record is not None:
                also_record(self.store)
            if self.run_id is not None:
                run = RunRecord(
                    self.context.run_id,
                    self.experiment,
                    self.round,
                    self.asset,
                    self.run_id,
                    self.version,
                    self.config.to_dict(),
                )
                self.store.record_run(run)
        failpoint(f"recorded:{self.asset}")  # committed: a stage boundary
        for run_id in unrecorded:  # MLflow again: outside the session
            self.run_id = self.tracker.settle_round_run(
                self.store, self.experiment, self.round, self.config.to_dict(), run_id, self.run_id
            )
        return self.resumed

    def write(self, frame: pd.DataFrame, schema: str, variant: str = "") -> FileRecord:
        """Validate against the table's schema and write it atomically to its place (not yet recorded)."""
        frame = validate(SCHEMAS[schema], frame, schema)
        path = self.lineage.table_path(self.experiment, self.round, schema, variant)
        return write_parquet_atomic(frame, path)

    def _record(
        self, output: Output, files: FileRecord | tuple[str, dict], facts: Mapping[str, Any]
    ) -> ArtifactRecord:
        parents = _resolve(output.parents, lambda o: o.record)
        assert parents is not None  # declared outputs are recorded in order
        if isinstance(files, FileRecord):
            on_disk = {FINGERPRINT: files.fingerprint} if files.fingerprint is not None else {}
            path, content_hash, rows = files.path, files.content_hash, files.rows
        else:
            (content_hash, on_disk), path, rows = files, str(output.value), None
        record = self.store.record_artifact(
            ArtifactRecord(
                experiment=self.experiment,
                round=self.round,
                kind=output.kind,
                variant=output.variant,
                path=path,
                content_hash=content_hash,
                rows=rows,
                meta={**output.meta, **facts, **on_disk},
                dagster_run_id=self.context.run_id,
            ),
            parents,
        )
        failpoint(f"after:{output.kind}")
        return record

    # 7-8. log and materialise

    def log(
        self,
        record: ArtifactRecord,
        metrics: Mapping[str, float],
        artifacts: list[str] | None = None,
        series: list[dict[str, float]] | None = None,
    ) -> None:
        """Add the asset's metrics (and per-update `series`) to its round's MLflow run, in one batch.

        Metrics already on the run (logged by an attempt that was killed later) are not logged twice."""
        assert self.tracker is not None and self.run_id is not None, "log after produce(link_run=True)"
        logged = self.tracker.logged_keys(self.run_id)
        prefix = f"{self.asset}{SERIES_MARK}"
        columns = (
            {}
            if not series or any(key.startswith(prefix) for key in logged)
            else {f"{prefix}{k}": [float(row[k]) for row in series] for k in series[0]}
        )
        self.tracker.log(
            self.run_id,
            metrics={f"{self.asset}/{k}": v for k, v in metrics.items() if f"{self.asset}/{k}" not in logged},
            tags={
                f"dagster_run_id.{self.asset}": self.context.run_id,
                f"data_version.{self.asset}": record.content_hash,
            },
            artifacts=artifacts,
            series=columns,
        )
        failpoint(f"mlflow:{self.asset}")

    def materialized(
        self, record: ArtifactRecord, asset_key: str | None = None, **metadata
    ) -> dg.MaterializeResult:
        """The Dagster result: the content hash as data version, plus what a person wants to see, and a link
        to the round's MLflow run."""
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metadata.items()}
        rows = {"rows": record.rows} if record.rows is not None else {}
        if self.run_id is not None and self.tracker is not None:
            shown["mlflow_run"] = dg.MetadataValue.url(self.tracker.run_url(self.run_id))
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


def _resolve(
    parents: Sequence[tuple[str | Output, str]], record_of: Callable[[Output], ArtifactRecord | None]
) -> list[tuple[str, str]] | None:
    """Parents as (hash, relation), an `Output` parent by the hash of `record_of` it; None if one has none."""
    resolved = []
    for parent, relation in parents:
        if isinstance(parent, Output):
            record = record_of(parent)
            if record is None:
                return None
            parent = record.content_hash
        resolved.append((parent, relation))
    return resolved


def lookup_artifact(
    store: LineageStore, experiment: str, round_: int, kind: str, variant: str = ""
) -> ArtifactRecord:
    """The recorded artifact (a lineage read; its bytes are fetched from object storage only if missing
    here)."""
    record = store.artifact(experiment, round_, kind, variant)
    return local_record(store, record, experiment, round_, kind, variant)


def local_record(
    store: LineageStore, record: ArtifactRecord | None, experiment: str, round_: int, kind: str, variant: str
) -> ArtifactRecord:
    """`record` (the one under this key, or None), its bytes fetched as `lookup_artifact` says; a clear error
    when it is not recorded."""
    if record is None:
        raise FileNotFoundError(
            f"{experiment} round {round_}: no {kind!r} artifact (variant {variant!r}) recorded"
        )
    return store.ensure_local(record)


def read_checked(record: ArtifactRecord, categories: Sequence[str] = ()) -> pd.DataFrame:
    """A recorded table, checked before use: a file changed since it was recorded is refused. The columns
    named in `categories` are read as categoricals (`read_parquet`).

    The quick check (`check_on_disk(quick=True)`): a file with the fingerprint its writer took when it hashed
    the bytes is trusted (the round tables' blocking checks re-hash them once more, `verify` re-hashes
    everything); any other is re-hashed."""
    if problem := check_on_disk(record, quick=True):
        raise ChangedInputError(problem.detail)
    return read_parquet(record.path, categories)


def matching_output(
    record: ArtifactRecord | None, parents: Sequence[tuple[str, str]], meta: Mapping | None = None
) -> ArtifactRecord | None:
    """`record` if it was recorded from exactly these parents and `meta` facts and its file still exists,
    else None: recompute.

    A round killed half-way is completed by running it again; a stage whose output is already recorded with
    exactly these parents (and these facts, e.g. the rubric version) is not redone. Its bytes are checked by
    `reusable`, after the session, by the blocking checks and by every reader."""
    if record is None or set(record.parents) != {tuple(p) for p in parents}:
        return None
    if any(record.meta.get(k) != v for k, v in (meta or {}).items()) or not os.path.exists(record.path):
        return None
    return record


def reusable(store: LineageStore, record: ArtifactRecord | None) -> ArtifactRecord | None:
    """`record` (a `matching_output`) if its bytes are still those recorded, checked outside any lineage
    session.

    Of a round not yet committed, an output that no longer matches its record (truncated, edited) is set aside
    (renamed beside itself and kept, `files.set_aside`), said in one line, and None returned: the stage
    regenerates it, as after a kill. A committed round's output is never regenerated silently: it is returned
    as it is, and its readers, the blocking checks and `verify` refuse or report it.
    """
    if record is None or (problem := check_on_disk(record, quick=True)) is None:
        return record
    if record.round in round_commits(store, record.experiment):
        return record
    aside = set_aside(record.path)
    print(
        f"set aside {aside}: {problem.detail}; round {record.round} is not committed, so it is regenerated",
        flush=True,
    )
    return None
