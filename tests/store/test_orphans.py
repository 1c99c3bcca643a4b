"""Temp files and folders of dead writers are found and cleared; a live writer's never are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from creditline.store import LineageStore, find_orphans, orphan_problems, orphans, remove_orphans
from creditline.store.files import _temp_sibling

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

# A writer that is half-way through a Parquet file and a checkpoint folder when it is killed: it goes
# through files' own atomic writers, so the temp names are the real ones.
_KILLED_WRITER = """
import sys, time
from pathlib import Path
from creditline.store import files
root = Path(sys.argv[1])
with files._atomic_file(root / "r001" / "episodes.parquet") as (tmp, fh):
    fh.write(b"PAR1" + bytes(1 << 16))
    fh.flush()
    with files.atomic_directory(root / "r001" / "policy") as folder:
        (folder / "model.safetensors").write_bytes(b"half a model")
        print("writing", flush=True)
        time.sleep(60)
"""


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(child.stdout)


def test_a_killed_writers_temp_file_and_folder_are_found_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "data"
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(root / "exp")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        assert find_orphans(root) == []  # alive: its temp entries are work in progress
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    found = find_orphans(root)
    assert [(Path(o.path).parent.name, o.tag, o.is_dir, o.action) for o in found] == [
        ("r001", "tmp", False, "delete"),
        ("r001", "tmp", True, "delete"),
    ]
    file, folder = found
    assert Path(file.path).name.startswith(".episodes.parquet.tmp-") and file.bytes == 4 + (1 << 16)
    assert Path(folder.target) == root / "exp/r001/policy" and folder.bytes == len(b"half a model")
    assert all(o.pid == writer.pid and str(writer.pid) in o.reason for o in found)

    assert remove_orphans(root) == found
    assert not any(Path(o.path).exists() for o in found)
    assert sorted(p.name for p in (root / "exp/r001").iterdir()) == []
    assert find_orphans(root) == [] and remove_orphans(root) == []


def test_this_processs_temp_entries_are_not_orphans(tmp_path: Path) -> None:
    live_file = _temp_sibling(tmp_path / "scores.parquet", "tmp")
    live_file.write_bytes(b"x")
    live_folder = _temp_sibling(tmp_path / "policy", "old")
    live_folder.mkdir()
    assert str(os.getpid()) in live_file.name
    assert find_orphans(tmp_path) == [] and remove_orphans(tmp_path) == []
    assert live_file.exists() and live_folder.exists()


def test_names_that_are_not_temp_siblings_are_left_alone(tmp_path: Path) -> None:
    pid = _dead_pid()
    for name in [".hidden", f"episodes.parquet.tmp-{pid}-1-0", f".episodes.parquet.tmp-{pid}-1",
                 f".episodes.parquet.new-{pid}-1-0", f".episodes.parquet.tmp-{pid}-1-0.bak"]:  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    dead = tmp_path / f".steps.v2.parquet.tmp-{pid}-140-3"
    dead.write_bytes(b"")
    (orphan,) = find_orphans(tmp_path)
    assert (orphan.path, orphan.target, orphan.pid) == (str(dead), str(tmp_path / "steps.v2.parquet"), pid)
    assert find_orphans(tmp_path / "does-not-exist") == []


def test_a_moved_aside_folder_whose_target_is_gone_is_renamed_back(tmp_path: Path) -> None:
    pid = _dead_pid()
    old = tmp_path / f".policy.old-{pid}-1-0"
    old.mkdir()
    (old / "config.json").write_text("{}")
    (orphan,) = find_orphans(tmp_path)
    assert (orphan.tag, orphan.action) == ("old", "restore")
    assert remove_orphans(tmp_path) == [orphan]
    assert (tmp_path / "policy" / "config.json").read_text() == "{}" and not old.exists()

    again = tmp_path / f".policy.old-{pid}-1-1"
    again.mkdir()
    (again / f".config.json.tmp-{pid}-1-2").write_text("inside a temp folder: goes with it")
    (orphan,) = find_orphans(tmp_path)
    assert orphan.action == "delete"  # the target is back: the moved-aside copy is rubbish
    remove_orphans(tmp_path)
    assert not again.exists() and (tmp_path / "policy").exists()


@needs_proc
def test_a_reused_pid_does_not_keep_an_orphan_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _temp_sibling(tmp_path / "episodes.parquet", "tmp")
    entry.write_bytes(b"x")
    assert find_orphans(tmp_path) == []
    # As if this process had started an hour after the entry was last changed: its pid is a reuse.
    real_boot = orphans._boot_time()
    assert real_boot is not None and real_boot < time.time()
    monkeypatch.setattr(orphans, "_boot_time", lambda: real_boot + 3600)
    (orphan,) = find_orphans(tmp_path)
    assert orphan.pid == os.getpid() and "reused" in orphan.reason


@needs_proc
def test_a_zombie_writer_is_dead(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (tmp_path / f".episodes.parquet.tmp-{child.pid}-1-0").write_bytes(b"")
        (orphan,) = find_orphans(tmp_path)
        assert f"no process with pid {child.pid} is running" in orphan.reason  # a zombie has stopped running
    finally:
        child.wait(timeout=10)


def test_orphan_problems_report_a_dead_writers_temp_file(store: LineageStore, tmp_path: Path) -> None:
    pid = _dead_pid()
    temp = tmp_path / "exp" / "r002" / f".scores.parquet.tmp-{pid}-7-0"
    temp.parent.mkdir(parents=True)
    temp.write_bytes(b"12345")
    assert store.verify("exp") == []  # the catalog's check; `creditline verify` adds orphan_problems
    (problem,) = orphan_problems(tmp_path)
    assert (problem.kind, problem.path, problem.expected_hash, problem.actual_hash) == (
        "orphan",
        str(temp),
        "",
        None,
    )
    assert problem.detail.startswith(
        f"exp/r002/.scores.parquet.tmp-{pid}-7-0: temp file (5 bytes) for scores.parquet"
    )
    assert f"no process with pid {pid} is running" in problem.detail
