"""`credit_dial`: a task family whose parameters set how hard step-level credit assignment is.

Step-level estimators (GiGPO, HGPO, turn_group, spo_tree, SPA) should beat trajectory-level ones (GRPO,
RLOO) when few of an episode's many turns matter, when the turns that matter show states that recur across
a group, and when the reward is sparse; on the other settings they should tie. This environment makes each
of those a parameter (`[env] params`), so a sweep can move one at a time and say where each side wins.

An episode is exactly `horizon` turns. Of these, `decisive` turns (drawn per task, in order, from a
generator seeded by the task id: interleaved with the others) show a cue, `go left 3`: a direction word
and a digit. The right action there is the cue's word; the digit is only part of the state (it makes
states differ without changing what is right). The other `horizon − decisive` turns are filler: they show
`go none` and any action there is as good as any other. The episode succeeds when every decisive turn was
answered with its cue's word. A mistake is not shown: the episode goes on to the end, as in tasks where an
early error only shows in the outcome, which is what makes the credit hard to assign.

The dials:

- `horizon`: turns per episode (`max_steps` is the horizon; the episode always runs to it).
- `decisive`: how many of them matter; the irrelevant (filler) turns are `horizon − decisive`.
- `distinct_states`: how many different states each decisive turn can show. The task draws that many
  distinct cues for each decisive turn; each episode draws one of them per decisive turn from its own
  seed. With 1, every episode of a group shows the same state at each decisive turn, so GiGPO's anchor
  groups (arXiv 2505.10978, Eq. 6) hold the whole group; with more, a decisive turn's anchor group holds
  about group_size / distinct_states episodes, and singletons give no step-level signal at all. Filler
  turns always recur across the whole group.
- `shaped_share`: the share of a perfect episode's reward (1) paid per correct decisive step as it is
  taken (`shaped_share / decisive` each); the rest, `1 − shaped_share`, is paid at the last turn on
  success. 0 is success-only (sparse); 1 is a dense per-step reward.
- `choices`: how many action words are valid (the first `choices` of up, down, left, right); cues use
  only those words.
- `rule`: what a decisive turn asks. `"word"` (the default): the cue names the answer (`go left 3` →
  `left`), so one rule, "answer the cue's word", serves every decisive turn, and a policy that finds it has
  solved them all at once. `"digit"`: the cue is a digit alone (`go 3`) and the answer is the word that
  digit stands for (`DIGIT_WORDS`, the same for every task and never shown): ten associations, each learnt
  from the turns that show its digit, so the credit must reach the turn that earned it. A decisive turn then
  has at most 10 states (its digits).
- `mistakes_shown`: False (the default): a mistake is not shown, every later turn looks the same on and off
  track, so a state shared across a group holds episodes that already failed beside ones that have not, and
  grouping by state (GiGPO's anchors) compares the same returns GRPO compares. True: after a mistake every
  later turn shows `go none` (the episode can no longer succeed, and says so, as a maze shows the cell a wrong
  move led to): a decisive state's group then holds only the episodes still on track, whose returns differ
  by this turn's answer and the later ones alone.

Random policy: choosing uniformly among the `choices` words at every turn succeeds with probability
(1/choices)^decisive (`random_success_rate`), and earns on average
shaped_share / choices + (1 − shaped_share) · (1/choices)^decisive. The built-in tiny policy samples its
whole vocabulary at first, so it starts lower; a warm start (`[warm_start] episodes`) teaches it the
action words, after which the formula holds.

The anchor is the history-free state `turn T go WORD DIGIT` (or `turn T go none` on filler turns): the
turn index and what the turn shows, never what was done before, so it depends on the task and the
episode's seed only and its recurrence is exactly the `distinct_states` dial. The prompt is the state
without the turn index (`go left 3`, `go none`): short, and made of words the built-in vocabulary already
has, so adding this environment changes no tokenizer and no default checkpoint.

Parse rule: as the maze, the action is the first word of the completion, case and punctuation ignored; a
word that is not one of the `choices` action words is invalid: it costs `invalid_penalty` (default 0, so
that filler turns are truly irrelevant to the return too) and, on a decisive turn, is a mistake.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from creditline.envs.base import Observation, Transition, first_word

ACTION_WORDS = ("up", "down", "left", "right")
"""The action words, in the order `choices` takes them."""
CUE_DIGITS = tuple(str(d) for d in range(10))
"""The digit beside a cue's word: part of the state, not of the answer."""
FILLER_TEXT = "go none"
DIGIT_WORDS = ("left", "up", "right", "down", "up", "left", "down", "right", "left", "up")
"""Under `rule = "digit"`: the answer to `go D` is `DIGIT_WORDS[D]`, taken modulo `choices` in the action
words' order (with 2 choices: up for 0, 1, 4, 5, 8, 9 and down for 2, 3, 6, 7)."""
RULES = ("word", "digit")


@dataclass(frozen=True)
class DialTask:
    """What a task id fixes: which turns are decisive, and the cues each decisive turn can show."""

    decisive_turns: tuple[int, ...]
    """The decisive turns' indices (0-based, increasing)."""
    cue_pools: tuple[tuple[tuple[str, str], ...], ...]
    """For each decisive turn, its `distinct_states` distinct (answer word, digit) cues."""


def random_success_rate(choices: int, decisive: int) -> float:
    """Success of a policy that picks uniformly among the `choices` action words at every turn."""
    return (1 / choices) ** decisive


def digit_answer(digit: str, choices: int) -> str:
    """The answer to the cue `go DIGIT` under `rule = "digit"`."""
    return ACTION_WORDS[ACTION_WORDS.index(DIGIT_WORDS[int(digit)]) % choices]


def task_layout(
    task: int, horizon: int, decisive: int, distinct_states: int, choices: int, rule: str = "word"
) -> DialTask:
    """The decisive turns and their cue pools, from a generator seeded by the task id and the dials alone."""
    seed = f"credit_dial:{horizon}:{decisive}:{distinct_states}:{choices}:{task}"
    rng = random.Random(seed if rule == "word" else f"{seed}:{rule}")  # the word rule's layouts as before
    turns = tuple(sorted(rng.sample(range(horizon), decisive)))
    if rule == "digit":
        cues = [(digit_answer(digit, choices), digit) for digit in CUE_DIGITS]
    else:
        cues = [(word, digit) for word in ACTION_WORDS[:choices] for digit in CUE_DIGITS]
    pools = tuple(tuple(rng.sample(cues, distinct_states)) for _ in turns)
    return DialTask(decisive_turns=turns, cue_pools=pools)


class CreditDialEnv:
    name = "credit_dial"
    instructions = (
        "Each message is one turn. When it says go and a direction, answer that direction; when it says "
        "go none, any answer will do. Answer with one word: a direction (up, down, left, right)."
    )

    def __init__(
        self,
        horizon: int = 8,
        decisive: int = 2,
        distinct_states: int = 1,
        shaped_share: float = 0.0,
        choices: int = 4,
        invalid_penalty: float = 0.0,
        rule: str = "word",
        mistakes_shown: bool = False,
    ):
        if not 1 <= horizon <= 100:
            raise ValueError(f"credit_dial horizon must be in 1..100, got {horizon}")
        if not 1 <= decisive <= horizon:
            raise ValueError(f"credit_dial decisive must be in 1..horizon ({horizon}), got {decisive}")
        if not 2 <= choices <= len(ACTION_WORDS):
            raise ValueError(f"credit_dial choices must be in 2..{len(ACTION_WORDS)}, got {choices}")
        if rule not in RULES:
            raise ValueError(f"credit_dial rule must be one of {', '.join(RULES)}, got {rule!r}")
        most_states = choices * len(CUE_DIGITS) if rule == "word" else len(CUE_DIGITS)
        if not 1 <= distinct_states <= most_states:
            states = "choices × 10 digits" if rule == "word" else "10 digits"
            raise ValueError(
                f"credit_dial distinct_states must be in 1..{most_states} ({states}), got {distinct_states}"
            )
        if not 0.0 <= shaped_share <= 1.0:
            raise ValueError(f"credit_dial shaped_share must be in 0..1, got {shaped_share}")
        if invalid_penalty < 0:
            raise ValueError(f"credit_dial invalid_penalty must be >= 0, got {invalid_penalty}")
        self.horizon = horizon
        self.max_steps = horizon
        self.decisive = decisive
        self.distinct_states = distinct_states
        self.shaped_share = float(shaped_share)
        self.choices = choices
        self.invalid_penalty = float(invalid_penalty)
        self.rule = rule
        self.mistakes_shown = bool(mistakes_shown)
        if rule == "digit":
            self.instructions = (
                "Each message is one turn. When it says go and a digit, answer the direction that digit "
                "stands for; when it says go none, any answer will do. Answer with one word: a direction "
                "(up, down, left, right)."
            )
        self._task: DialTask | None = None
        self._cues: dict[int, tuple[str, str]] = {}
        self._turn = 0
        self._on_track = True

    @property
    def action_words(self) -> tuple[str, ...]:
        return ACTION_WORDS[: self.choices]

    def reset(self, task: int, seed: int) -> Observation:
        self._task = task_layout(
            task, self.horizon, self.decisive, self.distinct_states, self.choices, self.rule
        )
        episode_rng = random.Random(f"credit_dial:{task}:{seed}")
        self._cues = {
            turn: episode_rng.choice(pool)
            for turn, pool in zip(self._task.decisive_turns, self._task.cue_pools, strict=True)
        }
        self._turn = 0
        self._on_track = True
        return self._observe()

    def step(self, action: str) -> Transition:
        if self._task is None:
            raise RuntimeError("CreditDialEnv.step called before reset")
        word = first_word(action)
        valid = word in self.action_words
        reward = 0.0 if valid else -self.invalid_penalty
        cue = self._shown_cue()  # None on filler turns: nothing is asked there, nothing paid
        if cue is not None:
            if word == cue[0]:
                reward += self.shaped_share / self.decisive
            else:
                self._on_track = False
        self._turn += 1
        done = self._turn >= self.horizon
        success = done and self._on_track
        if success:
            reward += 1.0 - self.shaped_share
        return Transition(
            observation=self._observe(),
            reward=reward,
            done=done,
            truncated=False,
            valid_action=valid,
            success=success,
            info={"decisive": cue is not None},
        )

    def snapshot(self) -> tuple:
        """The whole state, immutable (branching restarts from it: `creditline.rollout.branching`)."""
        return (self._task, tuple(self._cues.items()), self._turn, self._on_track)

    def restore(self, state: tuple) -> Observation:
        """Put the environment back in a `snapshot()`'s state; the observation there."""
        self._task, cues, self._turn, self._on_track = state
        self._cues = dict(cues)
        return self._observe()

    def _shown_cue(self) -> tuple[str, str] | None:
        """This turn's cue, None on a filler turn, and on every turn after a shown mistake."""
        return None if self.mistakes_shown and not self._on_track else self._cues.get(self._turn)

    def _observe(self) -> Observation:
        cue = self._shown_cue()
        if cue is None:
            text = FILLER_TEXT  # past the end too (unseen)
        else:
            text = f"go {cue[0]} {cue[1]}" if self.rule == "word" else f"go {cue[1]}"
        return Observation(text=text, anchor=f"turn {self._turn} {text}")

    def format_example(self, rng: random.Random) -> str:
        return rng.choice(self.action_words)

    @staticmethod
    def vocabulary() -> list[str]:
        return ["go", "none", *ACTION_WORDS, *CUE_DIGITS]
