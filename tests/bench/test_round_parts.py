"""`bench/round_parts.py`: each part's time outside the others, only inside the gate, originals back after."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.bench import load_bench

TIMED = """
import contextlib
import time

def run(seconds):  # the gate
    return outer(seconds)

def outer(seconds):
    time.sleep(seconds)
    with block(seconds):
        return inner(seconds) + 1

def inner(seconds):
    time.sleep(10 * seconds)
    return 1

@contextlib.contextmanager
def block(seconds):
    time.sleep(seconds)
    yield
"""


@pytest.fixture(scope="module")
def round_parts():
    return load_bench("round_parts")


@pytest.fixture
def timed(tmp_path, monkeypatch):
    (tmp_path / "timed_module.py").write_text(textwrap.dedent(TIMED))
    monkeypatch.syspath_prepend(str(tmp_path))
    import timed_module

    yield timed_module
    del sys.modules["timed_module"]


def test_each_part_is_charged_its_own_time_and_only_inside_the_gate(round_parts, timed, monkeypatch):
    monkeypatch.setattr(round_parts, "CONTEXT_MANAGERS", {"timed_module:block"})
    parts = {
        "outer": ("timed_module:outer",),
        "block": ("timed_module:block",),
        "inner": ("timed_module:inner",),
    }
    clock = round_parts.PartClock(parts, gate="timed_module:run")
    with clock.installed():
        assert timed.outer(0.02) == 2  # outside the gate: the real function, nothing charged
        assert not clock.seconds
        assert timed.run(0.02) == 2
    # outer slept 0.02 s itself, the block 0.02 s with inner's 0.2 s inside it: each is charged its own
    assert 0.2 <= clock.seconds["inner"] < 0.35
    assert 0.02 <= clock.seconds["block"] < 0.15 and 0.02 <= clock.seconds["outer"] < 0.15
    assert dict(clock.calls) == {"outer": 1, "block": 1, "inner": 1}
    assert clock.functions["timed_module:inner"] == clock.seconds["inner"]


def test_the_wrappers_replace_our_modules_references_and_go_after(round_parts):
    import assets.stage
    import creditline.store
    import creditline.store.files

    original = creditline.store.files.read_parquet
    with round_parts.PartClock().installed():
        assert (
            assets.stage.read_parquet is creditline.store.files.read_parquet is creditline.store.read_parquet
        )
        assert assets.stage.read_parquet is not original
    assert assets.stage.read_parquet is original and creditline.store.read_parquet is original
