"""Atomic writes leave either the old or the complete new artifact; hashes depend on content only."""

from __future__ import annotations

import os
import tempfile
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditline.ids import canonical_hash
from creditline.store import files
from creditline.store.files import (
    atomic_directory,
    config_hash,
    hash_directory,
    hash_file,
    hash_path,
    read_parquet,
    write_json_atomic,
    write_parquet_atomic,
)


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"episode_id": ["r0-t1-s0", "r0-t1-s1"], "reward": [0.5, -1.0], "ids": [[1, 2], [3]]},
        index=[10, 20],
    )


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_parquet_same_frame_same_hash_and_no_temp_files(tmp_path: Path) -> None:
    first = write_parquet_atomic(_frame(), tmp_path / "a.parquet")
    second = write_parquet_atomic(_frame(), tmp_path / "b.parquet")
    again = write_parquet_atomic(_frame(), tmp_path / "a.parquet")
    assert first.content_hash == second.content_hash == again.content_hash
    assert first.content_hash == hash_file(tmp_path / "a.parquet")
    assert (first.rows, first.bytes) == (2, os.path.getsize(tmp_path / "a.parquet"))
    assert Path(first.path).is_absolute()
    assert _leftovers(tmp_path) == []


def test_parquet_round_trip_drops_the_index_and_accepts_arrow(tmp_path: Path) -> None:
    record = write_parquet_atomic(_frame(), tmp_path / "t.parquet")
    back = read_parquet(record.path)
    expected = _frame().reset_index(drop=True)
    assert list(back.index) == [0, 1]
    assert back["episode_id"].tolist() == expected["episode_id"].tolist()
    assert [list(x) for x in back["ids"]] == [[1, 2], [3]]
    from_arrow = write_parquet_atomic(
        pa.Table.from_pandas(_frame(), preserve_index=False), tmp_path / "u.parquet"
    )
    assert from_arrow.content_hash == record.content_hash


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=8)), max_size=20
    )
)
def test_parquet_bytes_are_deterministic(rows: list[tuple[int, float, str]]) -> None:
    frame = pd.DataFrame(rows, columns=["a", "b", "c"]).astype({"a": "int64", "b": "float64", "c": "object"})
    with tempfile.TemporaryDirectory() as folder:
        one = write_parquet_atomic(frame, Path(folder) / "one.parquet")
        two = write_parquet_atomic(frame.copy(), Path(folder) / "two.parquet")
    assert one.content_hash == two.content_hash


def test_failed_rename_leaves_old_parquet_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.parquet"
    old = write_parquet_atomic(_frame(), target)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_parquet_atomic(_frame().assign(reward=0.0), target)
    assert hash_file(target) == old.content_hash
    assert _leftovers(tmp_path) == []


def test_atomic_directory_publishes_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        assert tmp.parent == tmp_path and not target.exists()
        (tmp / "weights.bin").write_bytes(b"v1")
    with atomic_directory(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"v2")
        (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "weights.bin"]
    assert (target / "weights.bin").read_bytes() == b"v2"
    assert _leftovers(tmp_path) == []


def test_atomic_directory_exception_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"v1")
    before = hash_directory(target)
    with pytest.raises(RuntimeError, match="crash"), atomic_directory(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"half")
        raise RuntimeError("crash mid-write")
    assert hash_directory(target) == before
    assert _leftovers(tmp_path) == []


def test_atomic_directory_failed_swap_restores_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"v1")
    before = hash_directory(target)
    real_replace = os.replace
    calls = {"n": 0}

    def replace_failing_second(src: str, dst: str) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # 1: old aside, 2: new into place, 3: old back
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace_failing_second)
    with pytest.raises(OSError, match="rename failed"), atomic_directory(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"v2")
    assert hash_directory(target) == before
    assert _leftovers(tmp_path) == []


def _make_tree(root: Path, order: list[str], mtime: int) -> None:
    contents = {"a.txt": b"alpha", "sub/b.bin": b"\x00\x01", "sub/deeper/c.json": b"{}"}
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(contents[name])
        os.utime(path, (mtime, mtime))


def test_hash_directory_ignores_order_and_mtimes_but_not_bytes(tmp_path: Path) -> None:
    _make_tree(tmp_path / "x", ["a.txt", "sub/b.bin", "sub/deeper/c.json"], mtime=1_000_000)
    _make_tree(tmp_path / "y", ["sub/deeper/c.json", "a.txt", "sub/b.bin"], mtime=2_000_000)
    (tmp_path / "y" / "empty").mkdir()
    assert hash_directory(tmp_path / "x") == hash_directory(tmp_path / "y") == hash_path(tmp_path / "x")
    (tmp_path / "y" / "sub" / "b.bin").write_bytes(b"\x00\x02")
    assert hash_directory(tmp_path / "x") != hash_directory(tmp_path / "y")
    (tmp_path / "y" / "sub" / "b.bin").write_bytes(b"\x00\x01")
    (tmp_path / "y" / "a.txt").rename(tmp_path / "y" / "a2.txt")
    assert hash_directory(tmp_path / "x") != hash_directory(tmp_path / "y")


def test_hash_path_handles_files_and_missing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert hash_path(tmp_path / "f") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    with pytest.raises(FileNotFoundError):
        hash_path(tmp_path / "nope")


def test_write_json_atomic_is_canonical(tmp_path: Path) -> None:
    h1 = write_json_atomic({"b": 1, "a": [1, 2]}, tmp_path / "one.json")
    h2 = write_json_atomic({"a": [1, 2], "b": 1}, tmp_path / "two.json")
    assert h1 == h2 == hash_file(tmp_path / "one.json")
    assert _leftovers(tmp_path) == []
    assert config_hash({"b": 1, "a": 2}) == config_hash({"a": 2, "b": 1})
    assert len(config_hash({})) == 16


def test_each_kind_of_canonical_hash_keeps_its_keywords() -> None:
    """The kinds of hash differ only for non-ASCII text, values JSON lacks and NaN; each is stored or pinned, so
    each keeps the keywords it was made with (pinned: the values `json.dumps` and sha256 gave before
    `canonical_hash` made them all)."""
    text = {"name": "café ✓", "lr": 1e-05}
    assert config_hash(text) == canonical_hash(text) == "29ad479e20f3bea3"  # non-ASCII kept
    assert canonical_hash(text, ensure_ascii=True, allow_nan=False) == "d60e2d855cfb3856"  # params_hash's
    day = {"name": "café ✓", "day": date(2024, 1, 2)}
    assert canonical_hash(day, ensure_ascii=True, default=str) == "84d054f42554e5a1"  # rubric versions'
    with pytest.raises(TypeError):
        config_hash(day)
    with pytest.raises(ValueError):
        canonical_hash({"gamma": float("nan")}, ensure_ascii=True, allow_nan=False)
