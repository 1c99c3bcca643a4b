"""`countdown`: walk a counter to a target number with the words `more` and `less`.

Written against creditline's documented environment protocol only (`creditline.envs.base`): this
module imports nothing from creditline, as a user's environment need not. The package's rubric
(`creditline_countdown.rubrics`, the `countdown-solved` entry point) is made of creditline's data types.

The task id fixes the start and the target (0..`top`); each step moves the counter by one; reaching the
target ends the episode with reward 1; anything but `more`/`less` is invalid (penalty 0.1, no move). The
anchor is the counter and the target, so states recur across a group's samples.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

WORD = re.compile(r"[A-Za-z]+")
MOVES = {"more": 1, "less": -1}


@dataclass(frozen=True)
class Observation:
    text: str
    anchor: str


@dataclass(frozen=True)
class Transition:
    observation: Observation
    reward: float
    done: bool
    truncated: bool
    valid_action: bool
    success: bool = False
    info: dict = field(default_factory=dict)


class CountdownEnv:
    name = "countdown"
    instructions = "Move the counter to the target. Answer with one word: more or less."

    def __init__(self, top: int = 6, max_steps: int = 8, invalid_penalty: float = 0.1):
        if not 1 <= top <= 9:
            raise ValueError(f"countdown top must be in 1..9 (single digit words), got {top}")
        self.top, self.max_steps, self.invalid_penalty = top, max_steps, invalid_penalty
        self._at = self._target = self._steps = 0

    def reset(self, task: int, seed: int) -> Observation:
        rng = random.Random(f"countdown:{self.top}:{task}")
        self._at, self._target = rng.sample(range(self.top + 1), 2)
        self._steps = 0
        return self._observe()

    def step(self, action: str) -> Transition:
        self._steps += 1
        match = WORD.search(action)
        move = MOVES.get(match.group(0).lower() if match else "")
        if move is not None:
            self._at = min(self.top, max(0, self._at + move))
        success = self._at == self._target
        return Transition(
            observation=self._observe(),
            reward=(1.0 if success else 0.0) - (0.0 if move is not None else self.invalid_penalty),
            done=success,
            truncated=not success and self._steps >= self.max_steps,
            valid_action=move is not None,
            success=success,
        )

    def format_example(self, rng: random.Random) -> str:
        return rng.choice(list(MOVES))

    @staticmethod
    def vocabulary() -> list[str]:
        return ["at", "target", *MOVES, *[str(d) for d in range(10)]]

    def _observe(self) -> Observation:
        text = f"at {self._at} target {self._target}"
        return Observation(text=text, anchor=text)


def make_countdown(**params) -> CountdownEnv:
    """The same environment through a factory function, for configs that name it by import path."""
    return CountdownEnv(**params)


class MinimalCountdownEnv:
    """Countdown with only the protocol's required members (no instructions, format_example or vocabulary):
    what a user writes first, before any optional feature."""

    name = "countdown-minimal"

    def __init__(self, **params):
        self._inner = CountdownEnv(**params)
        self.max_steps = self._inner.max_steps

    def reset(self, task: int, seed: int) -> Observation:
        return self._inner.reset(task, seed)

    def step(self, action: str) -> Transition:
        return self._inner.step(action)
