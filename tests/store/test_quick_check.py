"""Hash once when written: readers trust the stat fingerprint its writer took (size, mtime, inode, ctime) while it
is unchanged, `verify` re-hashes, a folder's manifest names what changed; and a burst of lineage calls shares
one connection (`LineageStore.session`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from creditline.store import (
    ArtifactRecord,
    LineageStore,
    RetryPolicy,
    StoreLockedError,
    check_on_disk,
    files,
    hashed_folder,
    write_parquet_atomic,
)


def _checkpoint(store: LineageStore, folder: Path) -> ArtifactRecord:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    (folder / "config.json").write_text('{"a": 1}')
    content_hash, manifest = hashed_folder(folder)
    return store.record_artifact(
        ArtifactRecord("exp", 1, "checkpoint", str(folder), content_hash, meta=manifest)
    )


def test_a_reader_trusts_an_unchanged_folder_without_reading_it(tmp_path, monkeypatch):
    store = LineageStore(tmp_path / "lineage.duckdb")
    record = _checkpoint(store, tmp_path / "policy")
    assert set(record.meta["on_disk"]) == {"config.json", "model.safetensors"}  # its writer's fingerprint
    read: list[str] = []
    real = files.hash_file
    monkeypatch.setattr(files, "hash_file", lambda path: read.append(Path(path).name) or real(path))
    assert check_on_disk(record, quick=True) is None and read == []  # trusted: no byte read
    assert check_on_disk(record) is None and sorted(read) == ["config.json", "model.safetensors"]  # full


def test_a_changed_file_is_re_hashed_and_named(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    record = _checkpoint(store, tmp_path / "policy")
    (tmp_path / "policy" / "config.json").write_text('{"a": 2}')  # same size, new mtime
    for quick in (True, False):
        problem = check_on_disk(record, quick=quick)
        assert problem.kind == "changed" and "(config.json)" in problem.detail, problem
    (tmp_path / "policy" / "extra.bin").write_bytes(b"x")
    assert "(config.json, extra.bin)" in check_on_disk(record, quick=True).detail


def _recorded_table(store: LineageStore, path: Path) -> ArtifactRecord:
    written = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), path)
    meta = {"on_disk": written.fingerprint}
    return store.record_artifact(
        ArtifactRecord("exp", 1, "steps", written.path, written.content_hash, meta=meta)
    )


def test_an_mtime_preserving_edit_is_caught_by_its_ctime(tmp_path):
    """`utime` can put the mtime back (as `cp -p` and `rsync -a` do); the ctime it cannot."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    record = _recorded_table(store, tmp_path / "t.parquet")
    assert check_on_disk(record, quick=True) is None
    stat = os.stat(record.path)
    data = bytearray(Path(record.path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(record.path).write_bytes(bytes(data))
    os.utime(record.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a deliberate, mtime-keeping edit
    assert check_on_disk(record, quick=True).kind == "changed"
    assert check_on_disk(record).kind == "changed"
    assert [p.kind for p in store.verify("exp")] == ["changed"]


def test_a_file_replaced_between_its_hash_and_its_record_is_not_trusted(tmp_path):
    """Two attempts of one partition: A hashes its file, B replaces it, A records. The fingerprint is the
    one A's writer took (A's inode), so the record does not vouch for B's bytes: the reader re-hashes."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    path = tmp_path / "t.parquet"
    first = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), path)
    write_parquet_atomic(pd.DataFrame({"x": [3, 4]}), path)  # the other attempt lands
    record = store.record_artifact(ArtifactRecord("exp", 1, "steps", first.path, first.content_hash,
                                                  meta={"on_disk": first.fingerprint}))  # fmt: skip
    assert check_on_disk(record, quick=True).kind == "changed"


def test_a_record_without_its_writers_fingerprint_is_always_re_hashed(tmp_path, monkeypatch):
    store = LineageStore(tmp_path / "lineage.duckdb")
    written = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), tmp_path / "t.parquet")
    record = store.record_artifact(ArtifactRecord("exp", 1, "steps", written.path, written.content_hash))
    assert "on_disk" not in record.meta
    read: list[str] = []
    real = files.hash_file
    monkeypatch.setattr(files, "hash_file", lambda path: read.append(path) or real(path))
    assert check_on_disk(record, quick=True) is None and len(read) == 1


def test_a_changed_source_folder_is_a_problem_not_a_crash(tmp_path):
    """A staged verifiers folder keeps its own "files" list in meta; the manifest lives under its own key."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    folder = tmp_path / "source"
    folder.mkdir()
    (folder / "results.jsonl").write_text('{"a": 1}\n')
    content_hash, on_disk = hashed_folder(folder)
    listed = {"files": [{"name": "results.jsonl", "sha256": "…", "bytes": 9}]}
    record = store.record_artifact(ArtifactRecord("exp", 1, "source", str(folder), content_hash,
                                                  meta={**listed, **on_disk}))  # fmt: skip
    (folder / "results.jsonl").write_text('{"a": 2}\n')
    assert "(results.jsonl)" in check_on_disk(record, quick=True).detail
    assert [p.kind for p in store.verify("exp")] == ["changed"]


def test_a_copied_data_root_only_costs_a_re_hash(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    record = _checkpoint(store, tmp_path / "policy")
    for f in (tmp_path / "policy").iterdir():
        os.utime(f, ns=(0, 10**18))  # as a copy that does not keep mtimes
    assert check_on_disk(record, quick=True) is None


_OPEN = "import duckdb, sys; duckdb.connect(sys.argv[1]).close(); print('opened')"


def test_a_session_holds_one_connection_and_releases_the_file_after(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb", RetryPolicy(timeout_s=0.3))
    store.register_experiment("exp", {"seed": 0})

    def other_process_opens() -> bool:
        done = subprocess.run(
            [sys.executable, "-c", _OPEN, store.path], capture_output=True, text=True, timeout=60
        )
        return done.stdout.strip() == "opened"

    with store.session():
        assert store.experiment_config("exp") == {"seed": 0}
        with store.session():  # nested: the outer connection
            assert store.experiment_config("exp") == {"seed": 0}
        assert not other_process_opens()  # held for the block
        with pytest.raises(ZeroDivisionError):
            store.transaction(lambda con: (con.execute("DELETE FROM experiments"), 1 / 0))
        assert store.experiment_config("exp") == {"seed": 0}  # the failed transaction was rolled back
    assert other_process_opens()  # and released after it


def test_a_session_waits_for_another_writer_like_any_call(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb", RetryPolicy(timeout_s=0.5))
    store.register_experiment("exp", {})
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('locked', flush=True); time.sleep(30)", store.path],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError, match="lineage.duckdb"), store.session():
            pass
    finally:
        holder.kill()
        holder.wait()
