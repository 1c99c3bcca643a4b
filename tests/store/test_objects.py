"""Artifacts published to object storage (a real S3-compatible server, moto) before their records."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from creditline.store import (
    ArtifactRecord,
    LineageStore,
    atomic_directory,
    hash_directory,
    write_parquet_atomic,
)
from creditline.store.objects import ObjectStore

_BUCKETS = itertools.count()


@pytest.fixture
def objects(s3, tmp_path) -> ObjectStore:
    bucket = s3.bucket(f"artifacts-{next(_BUCKETS)}")
    return ObjectStore(f"{bucket}/prefix", str(tmp_path / "data"), {"endpoint_url": s3.endpoint_url})


def _artifacts(root: Path) -> tuple[ArtifactRecord, ArtifactRecord]:
    table = write_parquet_atomic(pd.DataFrame({"a": [1, 2, 3]}), root / "exp" / "r001" / "steps.parquet")
    with atomic_directory(root / "exp" / "r001" / "policy") as folder:
        (folder / "config.json").write_text("{}")
        (folder / "sub").mkdir()
        (folder / "sub" / "weights.bin").write_bytes(b"\0" * 1000)
    folder_path = root / "exp" / "r001" / "policy"
    return (ArtifactRecord("exp", 1, "steps", table.path, table.content_hash, rows=3),
            ArtifactRecord("exp", 1, "checkpoint", str(folder_path), hash_directory(folder_path)))  # fmt: skip


def test_every_record_names_its_object_and_the_object_has_the_recorded_bytes(objects, tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb", objects=objects)
    table, folder = _artifacts(Path(objects.data_root))
    for artifact in (table, folder):
        recorded = store.record_artifact(artifact, [])
        uri = store.artifact("exp", 1, artifact.kind).meta["object"]
        assert recorded.meta["object"] == uri == objects.key_for(artifact.path, artifact.content_hash)
        assert uri.startswith(f"{objects.uri}/exp/r001/")
        fetched = objects.fetch(uri, artifact.content_hash, tmp_path / "fetched" / artifact.kind)
        assert fetched.exists()
    keys = objects.filesystem().find(objects.uri)
    assert not [k for k in keys if "/." in k]  # no temporary key left
    assert sorted(k.rsplit("/prefix/", 1)[1] for k in keys) == [
        "exp/r001/policy/config.json", "exp/r001/policy/sub/weights.bin", "exp/r001/steps.parquet"]  # fmt: skip


def test_an_object_whose_bytes_changed_is_refused_on_fetch(objects, tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb", objects=objects)
    table, _ = _artifacts(Path(objects.data_root))
    uri = store.record_artifact(table, []).meta["object"]
    objects.filesystem().pipe(uri, b"not the parquet file")
    with pytest.raises(ValueError, match="hash to"):
        objects.fetch(uri, table.content_hash, tmp_path / "fetched")


_KILLED_WRITER = """
import json, sys
from creditline.store import ArtifactRecord, LineageStore
from creditline.store.objects import ObjectStore
catalog, uri, root, endpoint, path, content_hash = sys.argv[1:]
store = LineageStore(catalog, objects=ObjectStore(uri, root, {"endpoint_url": endpoint}))
store.record_artifact(ArtifactRecord("exp", 1, "checkpoint", path, content_hash), [])
"""


def test_a_writer_killed_mid_upload_publishes_no_record_and_a_rerun_completes(objects, tmp_path, s3):
    """SIGKILL after the second file of a folder reached its temporary key: no record, no complete object;
    readers see nothing. A plain re-run uploads again and records."""
    catalog = tmp_path / "lineage.duckdb"
    _, folder = _artifacts(Path(objects.data_root))
    env = {"CREDITLINE_FAULT": "publish:policy:2"}
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(catalog), objects.uri, objects.data_root,
                             s3.endpoint_url, folder.path, folder.content_hash],
                            env={**__import__("os").environ, **env}, capture_output=True, text=True)  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    store = LineageStore(catalog, objects=objects)
    assert store.artifact("exp", 1, "checkpoint") is None
    keys = objects.filesystem().find(objects.uri)
    assert any(
        "/.weights.bin.tmp-" in k or "/.config.json.tmp-" in k for k in keys
    )  # the killed upload's leftovers
    recorded = store.record_artifact(folder, [])
    objects.fetch(recorded.meta["object"], folder.content_hash, tmp_path / "fetched")


def test_a_worker_missing_a_recorded_input_fetches_it_into_place(objects, tmp_path):
    """Another machine (here: the same one after its disk lost the files) finds the records, not the bytes: the
    store fetches each from object storage into its recorded path, hash-checked; the round-to-round link does
    the same for the parent checkpoint."""
    import shutil

    from creditline.lineage_chain import parent_record
    from creditline.store import hash_path

    store = LineageStore(tmp_path / "lineage.duckdb", objects=objects)
    table, folder = _artifacts(Path(objects.data_root))
    recorded = [store.record_artifact(table, []), store.record_artifact(folder, [])]
    initial = store.record_initial_policy("exp", folder.path, folder.content_hash)
    shutil.rmtree(Path(objects.data_root))
    for record in recorded:
        assert store.ensure_local(store.artifact("exp", 1, record.kind)).path == record.path
        assert hash_path(record.path) == record.content_hash
    shutil.rmtree(Path(folder.path))
    assert hash_path(parent_record(store, "exp", 1).path) == initial.content_hash
    assert not [p for p in Path(objects.data_root).rglob(".*")]  # no temporary name left


def test_without_an_object_a_missing_file_is_left_for_the_readers_check(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    table, _ = _artifacts(tmp_path / "data")
    store.record_artifact(table, [])
    Path(table.path).unlink()
    assert store.ensure_local(store.artifact("exp", 1, "steps")).path == table.path
    assert not Path(table.path).exists()


def test_verify_re_hashes_the_objects_and_takes_a_missing_local_copy_for_a_cache(objects, tmp_path):
    """The objects are the shared copy: `verify` names an object whose bytes changed and one that is gone,
    although both local copies are intact (a local re-hash alone would call the store clean); a local copy
    that is absent while its object is sound is no problem (a machine fetches only what it reads)."""
    store = LineageStore(tmp_path / "lineage.duckdb", objects=objects)
    table, folder = _artifacts(Path(objects.data_root))
    table_uri = store.record_artifact(table, []).meta["object"]
    folder_uri = store.record_artifact(folder, []).meta["object"]
    assert store.verify("exp") == []
    Path(table.path).rename(tmp_path / "elsewhere.parquet")  # gone here, sound in the store
    assert store.verify("exp") == []
    Path(tmp_path / "elsewhere.parquet").rename(table.path)
    fs = objects.filesystem()
    fs.pipe(table_uri, b"not the parquet file")
    fs.rm(folder_uri, recursive=True)
    problems = {p.kind: p for p in store.verify("exp")}
    assert set(problems) == {"object_changed", "object_missing"}
    changed, missing = problems["object_changed"], problems["object_missing"]
    assert changed.path == table_uri and changed.expected_hash == table.content_hash
    assert changed.actual_hash not in (None, table.content_hash) and "exp/1/steps" in changed.detail
    assert missing.path == folder_uri and missing.actual_hash is None and "does not exist" in missing.detail
