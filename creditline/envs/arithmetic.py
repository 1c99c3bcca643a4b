"""`arithmetic`: a single-turn task with a checkable answer (trajectory-level GRPO's natural home).

The prompt is `a + b =` with the operands' digits spaced (`1 2 + 7 =`, one word-level token per digit)
and drawn from the task id. Parse rule: the completion is the answer's digits, spaces between them
ignored (`1 2` and `12` both mean twelve); anything else (`twelve`, `12.`, an empty completion) is an
invalid action. Reward 1 for the right number, 0 otherwise. One step per episode.
"""

from __future__ import annotations

import random
import re

from creditline.envs.base import Observation, Transition

_ANSWER = re.compile(r"[0-9]( *[0-9])*")


class ArithmeticEnv:
    name = "arithmetic"
    max_steps = 1
    instructions = "Add the two numbers. Answer with the sum in digits and nothing else."

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
        answer = action.strip()
        valid = _ANSWER.fullmatch(answer) is not None
        correct = valid and int(answer.replace(" ", "")) == sum(self._question)
        done_obs = Observation(text="", anchor="done")
        return Transition(
            observation=done_obs,
            reward=1.0 if correct else 0.0,
            done=True,
            truncated=False,
            valid_action=valid,
            success=correct,
        )

    def gold_answer(self) -> str:
        """The current task's sum written as the prompt writes numbers: digits spaced (`1 2`)."""
        if self._question is None:
            raise RuntimeError("ArithmeticEnv.gold_answer called before reset")
        return " ".join(str(sum(self._question)))

    def format_example(self, rng: random.Random) -> str:
        return str(rng.randint(0, 2 * self.max_operand))

    @staticmethod
    def vocabulary() -> list[str]:
        return ["+", "=", *[str(d) for d in range(10)]]
