"""The policy's mean log-probability of a gold answer after a prompt, teacher-forced, in batches.

IGPO (Wang et al., arXiv 2510.14967) gives each turn of a multi-turn episode an information-gain
reward: how much more likely the policy has become to produce the correct answer g = (g_1 … g_m)
once the turn's result is in its context. The likelihood is the mean token log-probability

    ℓ(x) = (1 / m) · Σ_j log π_θ(g_j | x, g_<j)        (temperature 1, teacher-forced)

and the turn reward is the gain ℓ(x_t) − ℓ(x_{t−1}) between the prompts after and before turn t
(`log_prob_diff` in the IGPO code). This module computes ℓ for many (prompt, answer) rows at once;
forming the differences is the estimator's business.

Each row is its prompt ids followed by the answer's ids (`tokenizer.encode(answer,
add_special_tokens=False)`); rows are right-padded into batches of `batch_rows` and scored by one
forward per batch through `creditline.logprobs.completion_logprobs`, the trainer's own log-prob path
(fp32 log-softmax, the LM head applied to the answer positions only, never the (R, L, V) logits).
Right padding keeps each row's real tokens at positions 0 … n−1, which are the position ids the model
assigns when none are passed, and the padding after them is masked out and never attended to by
earlier positions: a padded row scores as it would alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from creditline.logprobs import completion_logprobs

DEFAULT_BATCH_ROWS = 64


def gold_logprobs(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[str],
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> np.ndarray:
    """ℓ per row: the mean over the answer's tokens of log π(answer_j | prompt, answer_<j), (B,) float64.

    prompts: B token-id sequences (at least one token each, the answer's first token is predicted from
    the prompt's last); answers: B texts, each tokenising to at least one token. The model is put in
    eval mode for the pass and given back in the mode it was in; no gradient is kept.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"gold_logprobs: {len(prompts)} prompts but {len(answers)} answers")
    if batch_rows < 1:
        raise ValueError(f"gold_logprobs: batch_rows must be at least 1, got {batch_rows}")
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
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    means = np.empty(len(prompts), dtype=np.float64)  # (B,)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(prompts), batch_rows):
                stop = min(start + batch_rows, len(prompts))
                means[start:stop] = _batch_means(
                    model, prompts[start:stop], answer_ids[start:stop], pad_id, device
                )
    finally:
        model.train(was_training)
    return means


def _batch_means(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
) -> np.ndarray:
    """ℓ of R rows scored by one forward: (R,) float64."""
    rows = [
        torch.tensor([*prompt, *answer], dtype=torch.long)
        for prompt, answer in zip(prompts, answers, strict=True)
    ]
    input_ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_id)  # (R, L)
    lengths = torch.tensor([len(row) for row in rows])  # (R,)
    answer_lengths = torch.tensor([len(answer) for answer in answers])  # (R,)
    positions = torch.arange(input_ids.shape[1])  # (L,)
    attention_mask = (positions < lengths[:, None]).long()  # (R, L)
    # position j is a target when its NEXT token is an answer token: j ∈ [n − m − 1, n − 1)
    first_target = (lengths - answer_lengths - 1)[:, None]  # (R, 1)
    target_mask = (positions >= first_target) & (positions < lengths[:, None] - 1)  # (R, L)
    logp, _ = completion_logprobs(
        model, input_ids.to(device), attention_mask.to(device), target_mask.to(device), temperature=1.0
    )  # (N,), N = Σ m, row-major
    row_of_target = target_mask.nonzero()[:, 0]  # (N,)
    sums = torch.zeros(len(rows), dtype=torch.float64).index_add_(0, row_of_target, logp.double().cpu())
    return (sums / answer_lengths.double()).numpy()


def with_gold_logprobs(
    engine,
    tokenizer,
    env_factory: Callable[[], object],
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
        env = env_factory()
        env.reset(int(task), reset_seed(int(task), int(sample)))
        answers[(int(task), int(sample))] = env.gold_answer()
    per_row = [answers[(int(t), int(s))] for t, s in zip(steps["task_id"], steps["sample_idx"], strict=True)]
    return steps.assign(gold_logprob=gold_logprobs(model, tokenizer, list(steps["prompt_ids"]), per_row))
