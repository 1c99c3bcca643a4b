"""The cycle collector's pace while rounds run in-process (`pipelines.garbage_collection`)."""

import gc
from pathlib import Path

import pytest

import creditline.round
from pipelines.garbage_collection import YOUNGEST_THRESHOLD, rounds_pace
from tests.e2e.cli import creditline as run_cli

TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


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
