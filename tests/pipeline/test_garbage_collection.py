"""The cycle collector's pace while rounds run in-process (`pipelines.garbage_collection`)."""

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

import creditline.round
from pipelines.garbage_collection import YOUNGEST_THRESHOLD, rounds_pace
from tests.e2e.cli import creditline as run_cli

TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def thresholds():
    """The process's thresholds, put back after the test whatever it set."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("outside", "inside"),
    [
        ((700, 10, 10), (YOUNGEST_THRESHOLD, 10, 10)),  # Python's own
        ((50_000, 20, 5), (50_000, 20, 5)),  # a process already collecting less often keeps its pace
        ((0, 10, 10), (0, 10, 10)),  # collection off stays off
    ],
)
def test_the_block_collects_at_the_rounds_pace_and_restores_the_process_pace(thresholds, outside, inside):
    gc.set_threshold(*outside)
    with rounds_pace():
        assert gc.get_threshold() == inside
    assert gc.get_threshold() == outside
    with pytest.raises(RuntimeError), rounds_pace():  # a failing round restores it too
        raise RuntimeError("the round failed")
    assert gc.get_threshold() == outside


def test_creditline_run_generates_at_the_rounds_pace(thresholds, tmp_path, monkeypatch):
    """The stages of `creditline run` (in-process executor) see the rounds' pace; the command leaves the
    process's own."""
    gc.set_threshold(700, 10, 10)
    seen = []
    real = creditline.round.generate_rollouts

    def generate(*args, **kwargs):
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)

    monkeypatch.setattr(creditline.round, "generate_rollouts", generate)
    result = run_cli(tmp_path, "run", "--experiment", "pace", "--rounds", "1", "--config", str(TINY))
    assert result.returncode == 0, result.stderr[-3000:]
    assert seen == [(YOUNGEST_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)


SETTLING = r"""
import gc, json, sys, weakref
from pipelines.garbage_collection import rounds_pace

class Node:
    pass

def dropped_cycle():
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)  # alive until a full pass finds the cycle

full_passes = []
gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2 and full_passes.append(1))
if sys.argv[1] == "off":
    gc.disable()
seen = {}
with rounds_pace():
    seen["frozen in the first"] = gc.get_freeze_count()
made_between = dropped_cycle()
with rounds_pace():
    seen["frozen in the second"] = gc.get_freeze_count()
    seen["full passes entering the second"] = len(full_passes)
    seen["made between freed"] = made_between() is None
    made_inside = dropped_cycle()
gc.collect()
seen["made inside freed by a later pass"] = made_inside() is None
kept, passes = [{} for _ in range(1000)], len(full_passes)
with rounds_pace():
    seen["frozen more in the third"] = gc.get_freeze_count() - seen["frozen in the second"]
    seen["full passes entering the third"] = len(full_passes) - passes
print(json.dumps(seen))
"""


def settled(collection: str) -> dict:
    """What `SETTLING` saw, run in a process of its own (a freeze is for the whole process)."""
    done = subprocess.run(
        [sys.executable, "-c", SETTLING, collection], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_process_second_round_collects_once_and_freezes_the_survivors():
    seen = settled("on")
    assert seen["frozen in the first"] == 0  # a one-round process never pays the collection
    assert seen["full passes entering the second"] == 1
    assert seen["frozen in the second"] > 1000  # the modules, classes and functions imported so far
    assert seen["made between freed"]  # the collection came before the freeze: nothing garbage is frozen
    assert seen["made inside freed by a later pass"]  # what comes after the freeze is collected as ever
    assert seen["frozen more in the third"] <= 0  # once per process (the 1,000 dicts kept since stay out)
    assert seen["full passes entering the third"] == 0


def test_a_process_with_collection_off_neither_collects_nor_freezes():
    seen = settled("off")
    assert seen["full passes entering the second"] == 0
    assert seen["frozen in the second"] == 0
    assert not seen["made between freed"]
