"""`lookup`: a multi-turn search-and-answer task with a gold answer (IGPO's natural home).

A code digit (`0`–`9`) is hidden behind one of four places, `up`, `down`, `left` or `right`; the
task id fixes both the digit and the place through a seeded generator, so every sample of a group
searches the same world. Each turn the agent either looks at a place or answers:

- a look (a place word) reveals what is there: the code digit, or `no`. Looking at the same place
  twice is valid but wasteful (nothing new is seen, a turn is spent);
- an answer (a digit) ends the episode: reward 1 and success if it is the code, reward 0 otherwise.

Looks earn no reward, so the outcome alone says only whether the final answer was right. What a look
is worth is how much it tells about the answer: IGPO (arXiv 2510.14967) rewards each turn with the
gain in the policy's probability of the gold answer (`gold_answer()`, scored by
`creditline.credit.gold_answer.gold_logprobs`), which rises at the turn that finds the digit.

The prompt is the whole state: `key`, then each place looked at with what was found there, in the
fixed order up, down, left, right (`key`, `key left no`, `key up no left 7`); the anchor is that same
history-free string, so two samples that looked at the same places (in any order) share an anchor.
An episode with no answer by `max_steps` turns is truncated.

Parse rule: a completion whose first whitespace-separated token is one digit (trailing `.,;:!?`
ignored: `7`, `7.`, `7 up`) answers that digit; otherwise its first word, as the maze reads it (case
and punctuation ignored: `Up.`, `left, then up`), names the place to look at. Anything else (`12`,
`seven`, `jump`) is invalid: `invalid_penalty` is charged and nothing changes.

Words: the built-in tiny policy's vocabulary is the union of the built-in environments' words
(`builtin_vocabulary`: arithmetic's and the maze's first, `VOCABULARY_ORDER`, then the others' new words),
part of the default experiment's checkpoint hash. This environment uses only words the maze already has
(`key`, `no`, the places, digits), so it adds none.
"""

from __future__ import annotations

import random

from creditline.envs.base import Observation, Transition, first_word

PLACES = ("up", "down", "left", "right")
"""Where the code may be, in the order the observation lists them."""

DIGITS = tuple(str(d) for d in range(10))

_TRAILING_PUNCTUATION = ".,;:!?"


def hidden_code(task: int) -> tuple[str, str]:
    """(place, digit) of task `task`, drawn from a generator seeded by the task id alone."""
    rng = random.Random(f"lookup:{task}")
    return rng.choice(PLACES), rng.choice(DIGITS)


def parse_action(action: str) -> tuple[str, str] | None:
    """("answer", digit), ("look", place), or None when the completion is neither (the module's rule)."""
    tokens = action.split()
    if tokens and tokens[0].rstrip(_TRAILING_PUNCTUATION) in DIGITS:
        return "answer", tokens[0].rstrip(_TRAILING_PUNCTUATION)
    word = first_word(action)
    return ("look", word) if word in PLACES else None


class LookupEnv:
    name = "lookup"
    instructions = (
        "A code digit is hidden behind one of four places: up, down, left or right. Each message lists "
        "the places you have looked at and what you found there (the digit, or no). Answer with one word: "
        "a place to look there, or the code digit once you know it."
    )

    def __init__(self, max_steps: int = 6, invalid_penalty: float = 0.0):
        if max_steps < 1:
            raise ValueError(f"lookup max_steps must be at least 1, got {max_steps}")
        if invalid_penalty < 0:
            raise ValueError(f"lookup invalid_penalty must be >= 0, got {invalid_penalty}")
        self.max_steps = max_steps
        self.invalid_penalty = invalid_penalty
        self._code: tuple[str, str] | None = None
        self._seen: dict[str, str] = {}
        self._steps = 0

    def reset(self, task: int, seed: int) -> Observation:
        del seed  # the world is fully determined by the task
        self._code = hidden_code(task)
        self._seen = {}
        self._steps = 0
        return self._observe()

    def step(self, action: str) -> Transition:
        if self._code is None:
            raise RuntimeError("LookupEnv.step called before reset")
        self._steps += 1
        place, digit = self._code
        parsed = parse_action(action)
        reward, done, success = 0.0, False, False
        if parsed is None:
            reward = -self.invalid_penalty
        elif parsed[0] == "look":
            self._seen[parsed[1]] = digit if parsed[1] == place else "no"
        else:
            done = True
            success = parsed[1] == digit
            reward = 1.0 if success else 0.0
        return Transition(
            observation=self._observe(),
            reward=reward,
            done=done,
            truncated=not done and self._steps >= self.max_steps,
            valid_action=parsed is not None,
            success=success,
        )

    def gold_answer(self) -> str:
        """The current task's correct answer as the policy would write it: the code digit."""
        if self._code is None:
            raise RuntimeError("LookupEnv.gold_answer called before reset")
        return self._code[1]

    def snapshot(self) -> tuple:
        """The whole state, immutable (branching restarts from it: `creditline.rollout.branching`)."""
        return (self._code, tuple(self._seen.items()), self._steps)

    def restore(self, state: tuple) -> Observation:
        """Put the environment back in a `snapshot()`'s state; the observation there."""
        self._code, seen, self._steps = state
        self._seen = dict(seen)
        return self._observe()

    def _observe(self) -> Observation:
        seen = " ".join(f"{where} {self._seen[where]}" for where in PLACES if where in self._seen)
        state = f"key {seen}" if seen else "key"
        return Observation(text=state, anchor=state)

    def format_example(self, rng: random.Random) -> str:
        return rng.choice([*PLACES, *DIGITS])

    @staticmethod
    def vocabulary() -> list[str]:
        return ["key", "no", *PLACES, *[str(d) for d in range(10)]]
