"""`arithmetic`: a single-turn task with a checkable answer (trajectory-level GRPO's natural home).

The prompt is `a + b =` with digits drawn from the task id; the completion is read as the answer's
digits separated by spaces (`1 2` means twelve). Reward 1 for the right number, 0 otherwise; an
unparseable completion is an invalid action. One step per episode.
"""

from __future__ import annotations

import random

from creditline.envs.base import Observation, Transition


class ArithmeticEnv:
    name = "arithmetic"
    max_steps = 1

    def __init__(self, max_operand: int = 9):
        if not 1 <= max_operand <= 99:
            raise ValueError(f"max_operand must be in 1..99, got {max_operand}")
        self.max_operand = max_operand
        self._question: tuple[int, int] | None = None

    def reset(self, task: int, seed: int) -> Observation:
        del seed
        rng = random.Random(f"arithmetic:{self.max_operand}:{task}")
        a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
        self._question = (a, b)
        text = f"{' '.join(str(a))} + {' '.join(str(b))} ="
        return Observation(text=text, anchor=text)

    def step(self, action: str) -> Transition:
        if self._question is None:
            raise RuntimeError("ArithmeticEnv.step called before reset")
        words = action.split()
        valid = bool(words) and all(w.isdigit() and len(w) == 1 for w in words)
        correct = valid and int("".join(words)) == sum(self._question)
        done_obs = Observation(text="", anchor="done")
        return Transition(
            observation=done_obs,
            reward=1.0 if correct else 0.0,
            done=True,
            truncated=False,
            valid_action=valid,
            success=correct,
        )

    @staticmethod
    def vocabulary() -> list[str]:
        return ["+", "=", *[str(d) for d in range(10)]]
