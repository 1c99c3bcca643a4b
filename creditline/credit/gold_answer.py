"""The policy's mean log-probability of a gold answer after a prompt, teacher-forced, in batches.

IGPO (Wang et al., arXiv 2510.14967) gives each turn of a multi-turn episode an information-gain
reward: how much more likely the policy has become to produce the correct answer g = (g_1 … g_m)
once the turn's result is in its context. The likelihood is the mean token log-probability

    ℓ(x) = (1 / m) · Σ_j log π_θ(g_j | x, g_<j)        (temperature 1, teacher-forced)

and the turn reward is the gain ℓ(x_t) − ℓ(x_{t−1}) between the prompts after and before turn t
(`log_prob_diff` in the IGPO code). This module computes ℓ for many (prompt, answer) rows at once;
forming the differences is the estimator's business.

Each row is its prompt ids followed by the answer's ids (`tokenizer.encode(answer,
add_special_tokens=False)`), the answer in the place of a completion: the rows are packed as the trainer packs
step rows (`creditline.train.trainer.pack`) and scored by its no-gradient pass
(`creditline.train.trainer.score`: micro-batches of at most `token_budget` padded tokens, fp32 log-softmax on
the answer positions only, never the (R, L, V) logits). A right-padded row scores as it would alone: its
tokens keep positions 0 … n−1 and the padding after them is masked out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd
import torch

from creditline.train.trainer import TrainConfig, pack, score

if TYPE_CHECKING:
    from creditline.envs.base import Environment, GoldAnswerEnvironment

DEFAULT_TOKEN_BUDGET = 16_384


def gold_logprobs(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[str],
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> np.ndarray:
    """ℓ per row: the mean over the answer's tokens of log π(answer_j | prompt, answer_<j), (B,) float64.

    prompts: B token-id sequences (at least one token each, the answer's first token is predicted from
    the prompt's last); answers: B texts, each tokenising to at least one token. The model is put in
    eval mode for the pass and given back in the mode it was in; no gradient is kept.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"gold_logprobs: {len(prompts)} prompts but {len(answers)} answers")
    answer_ids = [tokenizer.encode(text, add_special_tokens=False) for text in answers]
    for row, (prompt, ids) in enumerate(zip(prompts, answer_ids, strict=True)):
        if not ids:
            raise ValueError(
                f"gold_logprobs: row {row}: the gold answer {answers[row]!r} tokenises to no tokens"
            )
        if not prompt:
            raise ValueError(
                f"gold_logprobs: row {row}: the prompt is empty (nothing to predict the answer from)"
            )
    if not prompts:
        return np.zeros(0)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    zeros = [np.zeros(len(ids)) for ids in answer_ids]
    batch = pack(list(prompts), answer_ids, zeros, zeros, pad_id)  # the answer in a completion's place
    was_training = model.training
    model.eval()
    try:
        logp = score(model, batch, 1.0, TrainConfig(micro_batch_tokens=token_budget, bf16=False))  # (B, L)
    finally:
        model.train(was_training)
    sums = (logp.double() * batch.completion_mask).sum(1)  # (B,) over the answer's tokens
    return (sums / torch.tensor([len(ids) for ids in answer_ids], dtype=torch.float64)).numpy()


def with_gold_logprobs(
    engine,
    tokenizer,
    env_factory: Callable[[], Environment],
    steps: pd.DataFrame,
    reset_seed: Callable[[int, int], int],
) -> pd.DataFrame:
    """`steps` plus `gold_logprob`: ℓ of its episode's gold answer after each step's prompt (IGPO's belief).

    The gold answer of an episode is its environment's `gold_answer()` after reset(task, seed) with the
    seed the episode was played with (`reset_seed(task, sample)`); the pass runs the engine's torch model.
    """
    model = getattr(engine, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(
            'the gold-answer pass (IGPO) runs the policy with torch: rollouts.engine must be "torch"'
        )
    answers: dict[tuple[int, int], str] = {}
    for task, sample in steps[["task_id", "sample_idx"]].drop_duplicates().itertuples(index=False):
        # config_checks refuses IGPO for an environment without gold_answer()
        env = cast("GoldAnswerEnvironment", env_factory())
        env.reset(int(task), reset_seed(int(task), int(sample)))
        answers[(int(task), int(sample))] = env.gold_answer()
    per_row = [answers[(int(t), int(s))] for t, s in zip(steps["task_id"], steps["sample_idx"], strict=True)]
    return steps.assign(gold_logprob=gold_logprobs(model, tokenizer, list(steps["prompt_ids"]), per_row))
