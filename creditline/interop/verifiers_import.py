"""verifiers output as a round's rollouts: find the files, read them, stage them, build the tables.

`creditline import verifiers PATH` (and a round whose rollouts come from verifiers) goes through three
steps, each here once:

1. `read_source(PATH)`: PATH is a run folder or one of its files. `results.jsonl` (+ `metadata.json`)
   is verifiers' classic format (≤ 0.3.x, `verifiers_classic`); `traces.jsonl` is v1 (≥ 0.4,
   `verifiers_v1`). Every line is read and checked before anything is written: a bad line is a
   `SourceError` naming file, line and field, and nothing is stored.
2. `stage_source(source, folder)`: the source files are copied, atomically, into the round's folder
   (`<data_root>/<experiment>/rNNN/source/`), so the round never depends on the user's copy; the staged
   folder's content hash is the rollouts' lineage parent ("imported_from").
3. `source_tables(folder, experiment, round_)`: the staged files as the round's episodes and steps
   tables (`imported_rollouts.rollout_tables`); what the `rollouts` asset stores instead of generating.

Same files, same tables, same hashes: ids derive from (experiment, round, task, sample) and the files'
line order is not relied on.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from creditline.interop.imported_rollouts import ImportedRollout, SourceError, read_json_lines, rollout_tables
from creditline.interop.verifiers_classic import METADATA, RESULTS, read_classic, read_metadata
from creditline.interop.verifiers_v1 import TRACES, read_v1
from creditline.rollout.episodes import RolloutTables
from creditline.store import ArtifactRecord, LineageStore, atomic_directory, hash_file, hashed_folder

FORMATS = ("classic", "v1")
V1_EXTRAS = ("config.toml", "configs/resolved/eval.json")
"""Files of a v1 run kept beside `traces.jsonl` for lineage (what was run, with which settings)."""


@dataclass(frozen=True)
class Source:
    format: str
    """"classic" (results.jsonl) or "v1" (traces.jsonl)."""
    rollouts_file: Path
    files: tuple[Path, ...]
    """Every file staged: the rollouts file first, then metadata/config files found beside it."""
    rollouts: list[ImportedRollout] = field(repr=False)
    metadata: dict
    for_training: bool = True
    """False: an evaluation's rollouts, which are measured, never trained on: greedy sampling and tasks
    with one rollout are accepted (`imported_rollouts`)."""

    def describe(self) -> dict:
        """What lineage keeps: the format and each file's name, sha256 and size."""
        root = self.rollouts_file.parent
        return {
            "format": self.format,
            "files": [
                {"name": p.relative_to(root).as_posix(), "sha256": hash_file(p), "bytes": p.stat().st_size}
                for p in self.files
            ],
            "verifiers": {
                k: self.metadata[k] for k in ("env_id", "model", "version_info") if k in self.metadata
            },
        }


def find_rollouts_file(path: str | Path) -> tuple[str, Path]:
    """(format, rollouts file) for a run folder or a file in it."""
    path = Path(path).expanduser()
    if path.is_dir():
        for name in (RESULTS, TRACES):
            if (path / name).is_symlink() and not (path / name).exists():
                raise SourceError(
                    str(path / name), "path", "a symlink that leads nowhere (broken, or a loop)"
                )
        found = [
            (fmt, path / name)
            for fmt, name in (("classic", RESULTS), ("v1", TRACES))
            if (path / name).exists()
        ]
        if len(found) != 1:
            what = (
                "both results.jsonl and traces.jsonl" if found else "neither results.jsonl nor traces.jsonl"
            )
            raise SourceError(str(path), "folder", f"holds {what}; name the file to import")
        return found[0]
    if path.is_symlink() and not path.exists():
        raise SourceError(str(path), "path", "a symlink that leads nowhere (broken, or a loop)")
    if not path.is_file():
        raise SourceError(str(path), "path", "no such file or folder")
    if path.name == METADATA:
        return find_rollouts_file(path.parent)
    lines = read_json_lines(path)
    if lines and "traces" in lines[0][1]:
        return "v1", path
    if lines and "example_id" in lines[0][1]:
        return "classic", path
    raise SourceError(
        f"{path} line {lines[0][0] if lines else 1}",
        "format",
        "neither a verifiers v1 episode (no `traces`) nor a classic rollout (no `example_id`)",
    )


def read_source(path: str | Path, *, for_training: bool = True) -> Source:
    """Read and check every rollout of a verifiers run (see the module docstring); `for_training=False` for
    an evaluation's run (`Source.for_training`)."""
    fmt, rollouts_file = find_rollouts_file(path)
    if not read_json_lines(rollouts_file):
        raise SourceError(str(rollouts_file), "rollouts", "the file holds no rollouts (empty)")
    folder = rollouts_file.parent
    if fmt == "classic":
        metadata = read_metadata(folder)
        extras = [folder / METADATA] if (folder / METADATA).exists() else []
        rollouts = read_classic(rollouts_file, metadata, for_training=for_training)
        return Source(fmt, rollouts_file, (rollouts_file, *extras), rollouts, metadata, for_training)
    extras = [folder / name for name in V1_EXTRAS if (folder / name).exists()]
    rollouts = read_v1(rollouts_file, for_training=for_training)
    return Source(fmt, rollouts_file, (rollouts_file, *extras), rollouts, {}, for_training)


def stage_source(source: Source, folder: Path) -> tuple[str, dict]:
    """Copy the source's files into `folder` (atomically; the rollouts file under its canonical name) and
    return the folder's content hash and on-disk meta (`store.hashed_folder`)."""
    root = source.rollouts_file.parent
    with atomic_directory(folder) as tmp:
        for path in source.files:
            name = (
                (RESULTS if source.format == "classic" else TRACES)
                if path == source.rollouts_file
                else path.relative_to(root).as_posix()
            )
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tmp / name)
    return hashed_folder(folder)


def source_tables(source: Source, experiment: str, round_: int) -> RolloutTables:
    return rollout_tables(source.rollouts, experiment, round_, for_training=source.for_training)


def token_id_problem(source: Source, vocab_size: int) -> str | None:
    """Why the source cannot train a policy with `vocab_size` token ids (ids from another tokenizer), or
    None."""
    for rollout in source.rollouts:
        for t, step in enumerate(rollout.steps):
            top = max(step.prompt_ids + step.completion_ids, default=-1)
            if top >= vocab_size:
                return (
                    f"{rollout.where}: step {t} has token id {top}, beyond the policy's vocabulary of "
                    f"{vocab_size}: the rollouts were sampled by a model with another tokenizer (import "
                    "them into an experiment whose initial_policy is that model)"
                )
    return None


def record_source(
    store: LineageStore,
    source: Source,
    folder: Path,
    experiment: str,
    round_: int,
    parents: tuple[tuple[str, str], ...] = (),
    dagster_run_id: str | None = None,
) -> ArtifactRecord:
    """Stage the source's files as round `round_`'s "source" artifact: a root of lineage when imported,
    `generated_by` the parent checkpoint when a verifiers environment played it (`verifiers_source`)."""
    content_hash, on_disk = stage_source(source, folder)
    return store.record_artifact(
        ArtifactRecord(
            experiment=experiment,
            round=round_,
            kind="source",
            path=str(folder),
            content_hash=content_hash,
            rows=sum(len(r.steps) for r in source.rollouts),
            meta={**source.describe(), **on_disk},
            dagster_run_id=dagster_run_id,
        ),
        parents,
    )
