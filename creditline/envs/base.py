"""The environment protocol: what a rollout needs from a task world.

An environment is a small, deterministic state machine over text. `reset(task, seed)` puts it in
the task's start state; `step(action)` applies one model completion (already decoded to text) and
returns the next observation, the step's reward and whether the episode ended.

Every observation carries an `anchor`: a canonical, history-free description of the environment
state (GiGPO's "anchor observation", arXiv 2505.10978 §3.2). Two steps of the same group with equal
anchors were taken in the same state, which is what step-level (anchor-group) advantages need. The
prompt text may contain more than the anchor (a hint, the previous action); the anchor must not.

Actions are free text, as a chat policy writes them. Each environment states its parse rule (the maze
reads the first word, arithmetic the number) and applies it to the decoded completion; a completion that
does not parse is still a step: `valid_action` is False and the environment's penalty applies.
`instructions` is the task's description for chat policies (their system message); `format_example`
draws one well-formed action at random, which is what a warm start teaches (the format, not the task).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Observation:
    """What the policy sees at one turn, and the state it stands for."""

    text: str
    """The prompt text given to the policy for this turn."""
    anchor: str
    """Canonical history-free state; equal anchors within a group mean the same state."""


@dataclass(frozen=True)
class Transition:
    """The result of one `step`."""

    observation: Observation
    """The next observation (meaningless once `done` or `truncated`)."""
    reward: float
    """The environment's reward for this step."""
    done: bool
    """The episode ended by the task's own rule (success, or an answer was given)."""
    truncated: bool
    """The episode ended because the step limit was reached."""
    valid_action: bool
    """False when the completion could not be parsed as an action of this environment."""
    success: bool = False
    """True when the episode ended solving the task."""
    info: dict = field(default_factory=dict)


class Environment(Protocol):
    """A deterministic text environment. One instance runs one episode at a time.

    Required: `name`, `max_steps`, `reset`, `step` (`REQUIRED_MEMBERS`). Optional, each needed by one
    feature only: `instructions` (the system message of chat prompts; none without it), `format_example`
    (a warm start and the built-in chat policy's tokenizer corpus), `vocabulary` (the built-in tiny
    policy, whose tokenizer knows only listed words), `gold_answer` (IGPO's information-gain turn reward,
    arXiv 2510.14967, which scores the policy's log-probability of the correct answer after each turn). A
    feature that needs a missing member is refused when the config is loaded. `gold_answer`, and branching's
    `snapshot` and `restore`, are declared by the protocols below (a built-in may lack them).
    """

    name: str
    max_steps: int
    """The step limit; an episode is `truncated` when it reaches it."""
    instructions: str
    """What the task is and how to answer; the system message of a chat policy's conversation."""

    def reset(self, task: int, seed: int) -> Observation:
        """Start task `task`; `seed` drives any randomness inside the episode."""
        ...

    def step(self, action: str) -> Transition:
        """Apply one decoded completion."""
        ...

    def format_example(self, rng: random.Random) -> str:
        """A random well-formed action (valid in form, chosen without looking at the state)."""
        ...

    @staticmethod
    def vocabulary() -> list[str]:
        """Every word that can appear in this environment's observations or valid actions."""
        ...


class GoldAnswerEnvironment(Environment, Protocol):
    """An environment with the optional `gold_answer` (every built-in but the maze has it); a protocol of
    its own so that an environment without it is still an `Environment`."""

    def gold_answer(self) -> str:
        """The current task's correct final answer, written as a completion would write it (`7`, `1 2`);
        defined after `reset`. IGPO teacher-forces it after each turn's prompt
        (`creditline.credit.gold_answer.gold_logprobs`): the turn's reward is the gain in its mean token
        log-prob."""
        ...


class SnapshotEnvironment(Environment, Protocol):
    """An environment that can be restarted from a state it was in
    (`creditline.rollout.branching.can_snapshot`); without it, branching replays the recorded actions."""

    def snapshot(self) -> Any:
        """The current state, opaque to the caller."""
        ...

    def restore(self, state: Any) -> Observation:
        """Return to a state `snapshot` took; its observation."""
        ...


REQUIRED_MEMBERS = ("name", "max_steps", "reset", "step")


_WORD = re.compile(r"[A-Za-z]+")


def first_word(text: str) -> str:
    """The first run of letters in `text`, lowercased ("" if none): `"Up."` → `"up"`."""
    match = _WORD.search(text)
    return match.group(0).lower() if match else ""
