"""`countdown-solved`: a user's rubric, registered in the `creditline.rubrics` entry-point group.

Unlike the environment (`creditline_countdown`), a rubric imports creditline: `Rubric` and `Criterion`
are the data it is made of (`creditline.credit.rubrics`). creditline's own code never imports this module.
Besides the rubric, what a config may wrongly name: an object that is no rubric, a factory that fails.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from creditline.credit.rubrics import Criterion, Rubric


def solved(episodes: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """1 for an episode that reached its target, else 0 (the environment's per-step rewards ignored)."""
    return episodes["success"].to_numpy(dtype=np.float64)


def invalid_word(steps: pd.DataFrame) -> np.ndarray:
    """1 for a step whose completion was neither `more` nor `less`."""
    return (~steps["valid_action"].to_numpy(dtype=bool)).astype(np.float64)


def make_solved_rubric() -> Rubric:
    """The entry point's target: a factory called with no arguments."""
    return Rubric(
        "countdown-solved",
        (Criterion("solved", solved, "episode"), Criterion("invalid_word", invalid_word, "step", -0.25)),
    )


SOLVED = make_solved_rubric()
"""The same rubric as an object, for configs that name it by import path."""

WEIGHTS = {"solved": 1.0, "invalid_word": -0.25}
"""Not a rubric: a config naming it is refused."""


def broken_rubric() -> Rubric:
    """A factory that fails: a config naming it is refused with its error."""
    raise RuntimeError("no rubric today")
