"""Storage for the pure core: atomic, content-hashed files and the DuckDB lineage catalog over them.

``files`` writes Parquet, JSON and folders atomically and hashes them; ``lineage`` records which
artifact came from which. Neither knows about Dagster or MLflow: assets call them.
"""

from creditline.ids import canonical_json
from creditline.store.connection import RetryPolicy, is_lock_error
from creditline.store.errors import ExperimentConfigMismatch, StoreLockedError
from creditline.store.files import (
    atomic_directory,
    config_hash,
    directory_manifest,
    hash_directory,
    hash_file,
    hash_path,
    read_parquet,
    stat_fingerprint,
    write_bytes_atomic,
    write_json_atomic,
    write_parquet_atomic,
)
from creditline.store.lineage import (
    INITIAL_POLICY_KIND,
    INITIAL_POLICY_VARIANT,
    LineageStore,
    check_on_disk,
    hashed_folder,
)
from creditline.store.orphans import Orphan, find_orphans, orphan_problems, remove_orphans
from creditline.store.records import (
    ArtifactRecord,
    EvaluationRecord,
    FileRecord,
    LineageNode,
    Problem,
    ProblemKind,
    RunRecord,
)
from creditline.store.rubric_versions import (
    RubricVersionRecord,
    record_rubric_version,
    record_rubrics,
    rubric_definition,
    rubric_versions,
)

__all__ = [
    "check_on_disk",
    "write_bytes_atomic",
    "INITIAL_POLICY_KIND",
    "INITIAL_POLICY_VARIANT",
    "ArtifactRecord",
    "EvaluationRecord",
    "ExperimentConfigMismatch",
    "FileRecord",
    "LineageNode",
    "LineageStore",
    "Orphan",
    "Problem",
    "ProblemKind",
    "RetryPolicy",
    "RubricVersionRecord",
    "RunRecord",
    "StoreLockedError",
    "atomic_directory",
    "canonical_json",
    "config_hash",
    "directory_manifest",
    "find_orphans",
    "hash_directory",
    "hash_file",
    "hash_path",
    "hashed_folder",
    "is_lock_error",
    "orphan_problems",
    "read_parquet",
    "stat_fingerprint",
    "record_rubric_version",
    "record_rubrics",
    "remove_orphans",
    "rubric_definition",
    "rubric_versions",
    "write_json_atomic",
    "write_parquet_atomic",
]
