"""Hash once when written: readers trust an unchanged stat fingerprint, `verify` re-hashes, a folder's manifest
names what changed; and a burst of lineage calls shares one connection (`LineageStore.session`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from creditline.lineage_chain import hashed_folder
from creditline.store import (
    ArtifactRecord,
    LineageStore,
    RetryPolicy,
    StoreLockedError,
    check_on_disk,
    files,
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
    assert set(record.meta["on_disk"]) == {"config.json", "model.safetensors"}
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


def test_the_quick_check_trusts_an_mtime_preserving_edit_and_verify_does_not(tmp_path):
    """The boundary of the quick check, as git's index has it: same size and mtime is trusted."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    written = write_parquet_atomic(pd.DataFrame({"x": [1, 2]}), tmp_path / "t.parquet")
    record = store.record_artifact(ArtifactRecord("exp", 1, "steps", written.path, written.content_hash))
    stat = os.stat(written.path)
    data = bytearray(Path(written.path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(written.path).write_bytes(bytes(data))
    os.utime(written.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a deliberate, mtime-keeping edit
    assert check_on_disk(record, quick=True) is None
    assert check_on_disk(record).kind == "changed"
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
