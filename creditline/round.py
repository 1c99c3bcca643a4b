"""One round's stages, in the order the pipeline runs them: generate → score → (reward model) →
advantages → train → evaluate.

Each stage is a function of its inputs alone (tables, a model, the experiment config): no Dagster, DuckDB
or MLflow in here. The round's assets (`assets/`), `creditline import` and the benchmarks
(`bench/learning.py`, `bench/overhead.py`) all call these functions, so a benchmark measures the round that
`make run` runs, and the joins between the round's tables are written once
(`creditline.credit.round_advantages.join_on_step`, where stage 3, the advantages, lives).

The round's tables, one row per step (model call) unless said otherwise:

    episodes    (E rows)  one row per episode: success, return, steps, stop reason
    steps       (S rows)  prompt/completion token ids, sampling log-probs, anchor key, env reward
    scores      (S rows)  each rubric criterion, step_reward, episode_reward
    advantages  (S rows)  one scalar `advantage` per step and its `completion_length`

Per-token advantages (verifiers PR #941's `completion_advantages`: the step scalar repeated over the
completion's tokens) are not stored; `with_token_advantages` (`creditline.credit.round_advantages`) expands
them where they are consumed, when the trainer packs its batch or an export writes them. The exception is
an imported step whose source assigned per-token advantages (verifiers v1 node `advantages`): the steps
table keeps them (`preset_completion_advantages`), they are the step's `completion_advantages` as they are,
and its scalar `advantage` is their mean.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from creditline.config import ExperimentConfig
from creditline.credit.advantages import input_columns
from creditline.credit.advantages.igpo import GOLD_COLUMN
from creditline.credit.advantages.model_reward import MODEL_REWARD_COLUMN
from creditline.credit.gold_answer import with_gold_logprobs
from creditline.credit.reward_model import (
    all_row_values,
    episode_codes,
    reward_model_kind,
    step_batch,
    targets,
    train_reward_model,
)
from creditline.credit.round_advantages import join_on_step, with_token_advantages
from creditline.credit.rubric_registry import get_rubric
from creditline.engines import Engine
from creditline.ids import derive_seed
from creditline.rollout.branching import can_snapshot, choose_points, play_branches, with_branches
from creditline.rollout.episodes import RolloutTables, reset_seed, run_episodes
from creditline.rollout.evaluation import EvaluationSummary, evaluate
from creditline.rollout.tasks import training_task_ids
from creditline.train.policy_update import update_policy


def generate_rollouts(engine: Engine, tokenizer, config: ExperimentConfig, round_: int) -> RolloutTables:
    """Stage 1: play the round's training tasks, `group_size` samples each, with the parent policy; with
    branching on, then the continuations from the chosen steps (`creditline.rollout.branching`); for an
    estimator that reads it (IGPO), the policy's log-probability of the gold answer at every step
    (`gold_logprob`)."""
    settings, branching = config.rollouts, config.branching
    sampling = settings.sampling(config.seed)
    snapshots: dict[tuple[str, int], object] | None = (
        {} if branching.enabled and can_snapshot(config.env.build()) else None
    )
    tables = run_episodes(
        engine,
        tokenizer,
        config.env.build,
        config.name,
        round_,
        training_task_ids(config.seed, round_, settings.tasks_per_round),
        settings.group_size,
        sampling,
        settings.prompt_format,
        snapshots,
    )
    seed_of = lambda task, sample: reset_seed(sampling.seed, round_, task, sample)  # noqa: E731
    if branching.enabled:
        points = choose_points(tables.steps, branching, config.seed, round_)
        branches = play_branches(
            engine,
            tokenizer,
            config.env.build,
            tables.steps,
            points,
            branching.continuations,
            round_,
            sampling,
            settings.prompt_format,
            seed_of,
            snapshots,
        )
        tables = with_branches(tables, branches)
    if GOLD_COLUMN in input_columns(config.advantages.estimator):  # IGPO: the policy's belief at every step
        steps = with_gold_logprobs(engine, tokenizer, config.env.build, tables.steps, seed_of)
        tables = RolloutTables(tables.episodes, steps)
    return tables


def score_rollouts(config: ExperimentConfig, episodes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Stage 2: the experiment's training rubric on every step row (criteria, step and episode reward)."""
    return get_rubric(config.rubric).score(episodes, steps)


def fit_reward_model(
    model: torch.nn.Module,
    reference: torch.nn.Module | None,
    tokenizer,
    episodes: pd.DataFrame,
    steps: pd.DataFrame,
    scores: pd.DataFrame,
    config: ExperimentConfig,
    round_: int,
    optimizer_state: dict | None,
) -> tuple[pd.DataFrame, list[dict], dict]:
    """Stage 2b, for an estimator that reads a step-reward model (`prime`, `spa`): train the model in place on
    the round (`creditline.credit.reward_model`), then score every step row with it.

    Returns (`model_reward` per step row, keyed by episode_id and step_idx; per-update metrics; optimiser
    state). `reference` is the frozen initial policy where the kind needs one (PRIME), else None.
    """
    kind = reward_model_kind(config.advantages.estimator)
    if kind is None:
        raise ValueError(f"estimator {config.advantages.estimator!r} reads no step-reward model")
    settings = config.reward_model
    batch = step_batch(steps, tokenizer.pad_token_id)
    codes, episode_ids = episode_codes(steps)
    context = kind.prepare(batch, settings, reference)
    metrics, state = train_reward_model(
        kind,
        model,
        batch,
        codes,
        targets(kind, episode_ids, episodes, scores),
        settings,
        derive_seed(config.seed, round_, "reward_model"),
        context,
        optimizer_state,
    )
    values = all_row_values(kind, model, batch, context, settings.micro_batch_tokens)  # (S,)
    rewards = pd.DataFrame(
        {
            "episode_id": steps["episode_id"].to_numpy(),
            "step_idx": steps["step_idx"].to_numpy(),
            MODEL_REWARD_COLUMN: values,
        }
    )
    return rewards, metrics, state


def training_rows(steps: pd.DataFrame, advantages: pd.DataFrame) -> pd.DataFrame:
    """The step rows with their advantage, per step and per completion token (one advantage row per step),
    and a sample filter's `kept` where the advantages have one."""
    kept = ["kept"] if "kept" in advantages else []
    return with_token_advantages(join_on_step(steps, advantages, ["advantage", *kept], "advantages"))


def train_policy(
    model: torch.nn.Module,
    tokenizer,
    steps: pd.DataFrame,
    advantages: pd.DataFrame,
    config: ExperimentConfig,
    round_: int,
    optimizer_state: dict | None,
    reference_policy: str | Path | None = None,
) -> tuple[list[dict], dict]:
    """Stage 4: the clipped policy-gradient update of `model` in place; (per-update metrics, optimiser
    state)."""
    rows = training_rows(steps, advantages)
    if "kept" in rows:  # a sample filter's dropped episodes are not trained on
        rows = rows[rows["kept"].to_numpy(dtype=bool)]
    return update_policy(
        model, tokenizer.pad_token_id, rows, config, round_, optimizer_state, reference_policy
    )


def evaluate_policy(
    engine: Engine, tokenizer, config: ExperimentConfig, policy_round: int
) -> tuple[pd.DataFrame, EvaluationSummary]:
    """Stage 5: the policy after `policy_round` (0: the initial one) played greedily on the held-out tasks."""
    settings = config.rollouts
    return evaluate(
        engine,
        tokenizer,
        config.env.build,
        config.name,
        policy_round,
        config.eval.num_tasks,
        settings.max_new_tokens,
        settings.prompt_format,
        settings.stop,
    )
