"""SPA-RL's progress estimator (Wang et al. 2025, "SPA-RL: Reinforcing LLM Agents via Stepwise Progress
Attribution", arXiv 2505.20732; WangHanLinHenry/SPA-RL-Agent @ed20087, `prm/train_our_progress_model.py`).

The policy's transformer with a scalar head reads the last token of each step (the step's prompt and its
completion) and predicts the step's contribution ĉ_t to the episode's outcome; the contributions of an
episode are fit, as a sum, to its final reward:

    ĉ_t = w · h_t                        h_t: the last layer's hidden state at step t's last token
    L   = (Σ_t ĉ_t − R)²                 per episode, R the rubric's episode reward (SPA-RL's MSE)

so ĉ_t is step t's share of R, "stepwise progress". The model is a HF `…ForSequenceClassification` with one
label (the head `score`, bias-free), started from the experiment's initial policy with the head drawn from
the experiment's seed; the pooling is done here from the attention mask, not by the pad token.
Difference: SPA-RL's head is a linear map of the LM's logits (vocabulary → 1); here it reads the hidden
state, the usual reward-model head (one (H,) vector instead of a (V,) one).
`creditline.credit.advantages.model_reward.spa` turns the ĉ_t into advantages.
"""

from __future__ import annotations

import torch

from creditline.train.trainer import PackedBatch


def row_values(model: torch.nn.Module, batch: PackedBatch, rows: torch.Tensor, context) -> torch.Tensor:
    """ĉ_r of each row (its prompt + completion), (len(rows),) fp32."""
    del context
    device = next(model.parameters()).device
    length = int(batch.attention_mask[rows].sum(1).max())
    attention_mask = batch.attention_mask[rows, :length].to(device)  # (r, L) right-padded
    # `base_model` and `score`: submodules, which torch's `Module.__getattr__` stub types as `Tensor | Module`
    hidden = model.base_model(  # type: ignore[operator]
        input_ids=batch.input_ids[rows, :length].to(device), attention_mask=attention_mask
    ).last_hidden_state  # (r, L, H)
    last = attention_mask.sum(1) - 1  # (r,) each row's last real token
    return model.score(hidden[torch.arange(len(rows), device=device), last]).squeeze(-1).float()  # type: ignore[operator]


def loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the summed contributions z_e against the episode rewards y_e."""
    return ((z - y.to(z.dtype)) ** 2).mean()
