"""Greedy evaluation on held-out tasks.

Held-out task ids come from `creditline.rollout.tasks.eval_task_ids`, disjoint from training ids. Each task is
played once with greedy decoding (temperature 0), which makes the evaluation of a checkpoint deterministic.
With `[eval.verifiers]` a verifiers environment plays the evaluation instead
(`creditline.interop.verifiers_evaluation`: its eval split, the same examples every round, once each,
greedily); `summarize` measures both the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from creditline.engines.base import Engine, SamplingParams
from creditline.envs.base import Environment
from creditline.rollout.episodes import run_episodes
from creditline.rollout.tasks import eval_task_ids


@dataclass(frozen=True)
class EvaluationSummary:
    success_rate: float
    mean_return: float
    mean_steps: float
    invalid_action_rate: float
    episodes: int


def evaluate(
    engine: Engine,
    tokenizer,
    env_factory: Callable[[], Environment],
    experiment: str,
    round_: int,
    num_tasks: int,
    max_new_tokens: int,
    prompt_format: str = "auto",
    stop: Sequence[str] = (),
) -> tuple[pd.DataFrame, EvaluationSummary]:
    """Play every held-out task once, greedily (completions end as in training: EOS, `stop` strings,
    `max_new_tokens`); return the episode table and its summary."""
    greedy = SamplingParams(0.0, 1.0, max_new_tokens, seed=0, stop=tuple(stop))
    tables = run_episodes(
        engine, tokenizer, env_factory, experiment, round_, eval_task_ids(num_tasks), 1, greedy, prompt_format
    )
    return tables.episodes, summarize(tables.episodes, tables.steps)


def summarize(episodes: pd.DataFrame, steps: pd.DataFrame) -> EvaluationSummary:
    """An evaluation's episodes (E rows) and steps (S rows) in five numbers: the share of successful episodes,
    the mean return (a verifiers environment's: its reward), steps per episode, and the share of invalid
    actions."""
    return EvaluationSummary(
        success_rate=float(episodes["success"].mean()),
        mean_return=float(episodes["env_return"].mean()),
        mean_steps=float(episodes["num_steps"].mean()),
        invalid_action_rate=float(1.0 - steps["valid_action"].mean()),
        episodes=len(episodes),
    )
