"""`maze`: a key-and-door grid world where actions are words.

The agent stands on a `size × size` grid with a key and a door. Walking onto the key picks it up;
reaching the door while holding it solves the task (reward 1, episode ends). Actions are the words
`up`, `down`, `left`, `right` (see the parse rule below). An invalid completion costs
`invalid_penalty` and the agent does not move. A move into the outer wall is valid but has no
effect. Episodes stop at `max_steps`.

The task id fixes the layout (start, key, door) through a seeded generator, so every sample of a
group starts from the same state and states recur across the group's trajectories: anchor-state
grouping (GiGPO) has something to group. The anchor is always the history-free absolute state
`pos x y key x y door x y have no|yes`. The prompt is either that state (`view="absolute"`) or,
by default, the egocentric offset to the current target (`view="relative"`: `go key left 2 down 1`,
then `go door right 0 up 3` once the key is held). A 2-layer policy learning from sparse rewards
struggles to compare coordinates across prompt positions; the relative view makes the task one of
reading the right direction word, which it learns in tens of rounds on a CPU. The prompt adds the previous
action (`last up`, `last none`, `last invalid`) when `show_last_action` is on, as in the prototype that
learned (learning notes).

Parse rule: the action is the first word of the completion, case and punctuation ignored (`Up.` and
`up, then left` both move up); a completion whose first word is not a move is invalid.

`progress_reward` c > 0 adds potential-based shaping (Ng, Harada & Russell 1999, Eq. 2):
F(s, s') = Φ(s') − Φ(s) with Φ(s) = −c · (Manhattan length of the rest of the task). Shaping of this
form leaves the optimal policies unchanged, and over an episode it telescopes to c · (distance at the
start − distance at the end), so it cannot be farmed by walking in circles. It turns the sparse
success reward into a per-step signal, which is what step-level advantages (GiGPO) exploit.

The reward design follows the measured learning notes (shared/reference/learning-notes.md): the key
is picked up by walking onto it, there are no `pick`/`open` actions (with them a random policy
almost never succeeds and learning collapses), and a random policy succeeds 5–12 % of the time on a
5 × 5 grid with 16 steps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from creditline.envs.base import Observation, Transition, first_word

MOVES: dict[str, tuple[int, int]] = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


@dataclass(frozen=True)
class MazeLayout:
    start: tuple[int, int]
    key: tuple[int, int]
    door: tuple[int, int]


def layout_for_task(task: int, size: int) -> MazeLayout:
    """Three distinct cells drawn from a generator seeded by the task id alone."""
    rng = random.Random(f"maze:{size}:{task}")
    cells = rng.sample([(x, y) for x in range(size) for y in range(size)], 3)
    return MazeLayout(start=cells[0], key=cells[1], door=cells[2])


class MazeEnv:
    name = "maze"
    instructions = (
        "You are in a grid maze. Walk onto the key, then onto the door. Each message says where your "
        "target is (go key, or go door once you hold the key: left or right, up or down, and how many "
        "steps) and your last move. Answer with one word: up, down, left or right."
    )

    def __init__(
        self,
        size: int = 5,
        max_steps: int = 16,
        invalid_penalty: float = 0.1,
        show_last_action: bool = True,
        progress_reward: float = 0.0,
        view: str = "relative",
    ):
        if size < 2:
            raise ValueError(f"maze size must be at least 2, got {size}")
        if size > 10:
            raise ValueError(f"maze size must be at most 10 (coordinates are single digit words), got {size}")
        if max_steps < 1:
            raise ValueError(f"maze max_steps must be at least 1, got {max_steps}")
        if invalid_penalty < 0 or progress_reward < 0:
            raise ValueError(
                f"maze invalid_penalty and progress_reward must be >= 0, got "
                f"{invalid_penalty} and {progress_reward}"
            )
        self.size = size
        self.max_steps = max_steps
        self.invalid_penalty = invalid_penalty
        self.show_last_action = show_last_action
        self.progress_reward = progress_reward
        if view not in ("relative", "absolute"):
            raise ValueError(f"maze view must be 'relative' or 'absolute', got {view!r}")
        self.view = view
        self._last_action = "none"
        self._layout: MazeLayout | None = None
        self._pos = (0, 0)
        self._has_key = False
        self._steps = 0

    def reset(self, task: int, seed: int) -> Observation:
        del seed  # the maze is fully determined by the task
        self._layout = layout_for_task(task, self.size)
        self._pos = self._layout.start
        self._has_key = False
        self._steps = 0
        self._last_action = "none"
        return self._observe()

    def step(self, action: str) -> Transition:
        if self._layout is None:
            raise RuntimeError("MazeEnv.step called before reset")
        self._steps += 1
        word = first_word(action)
        move = MOVES.get(word)
        self._last_action = word if move is not None else "invalid"
        distance_before = self._remaining_distance()
        reward = 0.0
        if move is None:
            reward -= self.invalid_penalty
        else:
            x, y = self._pos[0] + move[0], self._pos[1] + move[1]
            if 0 <= x < self.size and 0 <= y < self.size:
                self._pos = (x, y)
            if self._pos == self._layout.key:
                self._has_key = True
        success = self._has_key and self._pos == self._layout.door
        reward += self.progress_reward * (distance_before - self._remaining_distance())
        if success:
            reward += 1.0
        truncated = not success and self._steps >= self.max_steps
        return Transition(
            observation=self._observe(),
            reward=reward,
            done=success,
            truncated=truncated,
            valid_action=move is not None,
            success=success,
        )

    def snapshot(self) -> tuple:
        """The whole state, immutable (branching restarts from it: `creditline.rollout.branching`)."""
        return (self._layout, self._pos, self._has_key, self._steps, self._last_action)

    def restore(self, state: tuple) -> Observation:
        """Put the maze back in a `snapshot()`'s state; the observation there."""
        self._layout, self._pos, self._has_key, self._steps, self._last_action = state
        return self._observe()

    def _remaining_distance(self) -> int:
        """Manhattan length of the rest of the task: to the key then the door, or to the door once held."""
        assert self._layout is not None
        (px, py), (kx, ky), (dx, dy) = self._pos, self._layout.key, self._layout.door
        if self._has_key:
            return abs(px - dx) + abs(py - dy)
        return abs(px - kx) + abs(py - ky) + abs(kx - dx) + abs(ky - dy)

    def _observe(self) -> Observation:
        assert self._layout is not None
        (px, py), (kx, ky), (dx, dy) = self._pos, self._layout.key, self._layout.door
        state = f"pos {px} {py} key {kx} {ky} door {dx} {dy} have {'yes' if self._has_key else 'no'}"
        if self.view == "relative":
            target, (tx, ty) = ("door", (dx, dy)) if self._has_key else ("key", (kx, ky))
            horizontal = f"left {px - tx}" if tx < px else f"right {tx - px}"
            vertical = f"up {py - ty}" if ty < py else f"down {ty - py}"
            text = f"go {target} {horizontal} {vertical}"
        else:
            text = state
        if self.show_last_action:
            text = f"{text} last {self._last_action}"
        return Observation(text=text, anchor=state)

    def format_example(self, rng: random.Random) -> str:
        return rng.choice(list(MOVES))

    @staticmethod
    def vocabulary() -> list[str]:
        return [
            "pos",
            "key",
            "door",
            "have",
            "yes",
            "no",
            "go",
            "last",
            "none",
            "invalid",
            *MOVES,
            *[str(d) for d in range(10)],
        ]
