"""PRIME's implicit process reward model (Cui et al. 2025, "Process Reinforcement through Implicit Rewards",
arXiv 2502.01456; verl's `recipe/prime` @246cac4, PRIME-RL/PRIME @18ad596).

A causal LM π_φ, started from the same checkpoint as a frozen reference π_ref (the experiment's initial
policy), is trained as an outcome reward model whose logit is a sum of per-token log-ratios:

    q_y   = log π_φ(y | x, y_<) − log π_ref(y | x, y_<)      every sampled completion token y
    v_t   = β · Σ_{y ∈ step t} q_y                           the implicit reward of step t (row t)
    L     = BCE(σ(Σ_t v_t), success)                         per episode (PRIME's `compute_ce_dpo_loss_rm`)

Trained so, β · log π_φ/π_ref is a process reward: a token's q_y is its share of the episode's log-odds
of success (PRIME §3.1, after Yuan et al. 2024, "Free process rewards without process labels"). Log-probs are
taken at temperature 1 (the raw models), on the completion tokens only (an environment's reply in a chat
prompt is context, never scored). The label is the episode's success (PRIME: the verifier's accuracy).

Granularity: PRIME gives each token its own q_y; a creditline advantage is one number per step, so a step's
tokens are summed (PRIME's "whole" granularity, applied per step).
`creditline.credit.advantages.model_reward.prime` turns the v_t into advantages.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from creditline.train.trainer import PackedBatch, TrainConfig, rows_logprobs, score

SCORING = TrainConfig()
"""The log-prob pass's settings (chunk size; bf16 autocast on CUDA): the trainer's defaults."""


def reference_logprobs(
    batch: PackedBatch, settings, reference: torch.nn.Module
) -> tuple[torch.Tensor, float]:
    """The context of `row_values`: log π_ref of every completion token, (R, L) on the CPU, and β."""
    if reference is None:
        raise ValueError("the implicit PRM needs its reference model (the experiment's initial policy)")
    return score(reference.eval(), batch, temperature=1.0, config=SCORING), float(settings.beta)


def row_values(model: torch.nn.Module, batch: PackedBatch, rows: torch.Tensor, context) -> torch.Tensor:
    """v_r = β Σ_y (log π_φ(y) − log π_ref(y)) over row r's completion tokens, (len(rows),) fp32."""
    reference, beta = context
    logp, _, mask, length = rows_logprobs(model, batch, rows, SCORING, temperature=1.0, top_p=1.0)  # (n,)
    ratio = logp - reference[rows, :length][mask].to(logp.device)  # (n,) q_y in row-major order
    row_of_token = mask.nonzero()[:, 0].to(logp.device)  # (n,) local row of each token
    return beta * torch.zeros(len(rows), device=logp.device).index_add(0, row_of_token, ratio)


def loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean BCE of σ(z_e) against y_e ∈ [0, 1] (z: (B,) episode log-odds)."""
    return F.binary_cross_entropy_with_logits(z, y.to(z.dtype))
