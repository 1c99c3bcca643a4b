"""Token-level clipped policy-gradient update on `completion_advantages`.

For every completion token t of every step row, with ρ_t = π_θ(y_t | x, y_<t) / μ(y_t | x, y_<t) the
ratio between the policy being trained and the sampling distribution that produced the token (the
engine's log-probs, same temperature), the PPO clipped surrogate (Schulman et al. 2017, Eq. 7) is

    L = − (1 / N_tokens) Σ_t min(ρ_t · A_t, clip(ρ_t, 1 − ε, 1 + ε) · A_t)  −  β · H̄,

averaged over all completion tokens of the minibatch ("token-level" aggregation, as in DAPO and
prime-rl, so long completions are not down-weighted). `A_t` is the step's advantage expanded per
token. H̄ is the mean entropy of the next-token distributions at completion positions; the bonus
(β = `entropy_coef`, PPO's c₂ term) keeps a tiny policy from collapsing onto one action before it has
found the reward. Optimiser: AdamW, `epochs` passes over the rows, each split into `minibatches` shuffled parts.

The trainer returns metrics and the optimiser state; it logs and writes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from creditline.faults import failpoint


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = field(default=2e-3, metadata={"range": "(0, 1]"})
    """AdamW's step size."""
    epochs: int = field(default=2, metadata={"range": "[1, 1000]"})
    """Passes over the round's step rows."""
    minibatches: int = field(default=4, metadata={"range": "[1, 100_000]"})
    """Optimiser steps per epoch; rows are shuffled into this many parts (at most a round's episodes)."""
    clip_eps: float = field(default=0.2, metadata={"range": "(0, 1]"})
    """PPO clip range ε."""
    entropy_coef: float = field(default=0.0, metadata={"range": "[0, 1]"})
    """Weight β of the entropy bonus −β·H̄ (mean next-token entropy over completion tokens); keeps exploring."""
    max_grad_norm: float = field(default=1.0, metadata={"range": "(0, 1000]"})
    """Gradients are clipped to this global norm."""
    weight_decay: float = field(default=0.0, metadata={"range": "[0, 1]"})
    """AdamW's decoupled weight decay."""
    temperature: float = field(default=1.0, metadata={"range": "(0, 10]"})
    """The sampling temperature: logits are divided by it so ρ compares like with like."""
    seed: int = field(default=0, metadata={"range": "[0, 2_147_483_647]"})
    """Seed of the minibatch shuffling."""


@dataclass(frozen=True)
class PackedBatch:
    """Right-padded prompt+completion sequences; `R` step rows, `L` the longest sequence."""

    input_ids: torch.Tensor  # (R, L) long
    attention_mask: torch.Tensor  # (R, L) long
    completion_mask: torch.Tensor  # (R, L) bool: True where the TARGET token at L index is a completion token
    old_logprobs: torch.Tensor  # (R, L) float: sampling log-prob of the target at that index
    advantages: torch.Tensor  # (R, L) float: per-token advantage of the target at that index


def pack(
    prompt_ids, completion_ids, completion_logprobs, completion_advantages, pad_token_id: int
) -> PackedBatch:
    """Pack per-row lists into tensors. Target index j holds token j+1's quantities (next-token)."""
    rows = len(prompt_ids)
    length = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids, strict=True))
    input_ids = torch.full((rows, length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, length), dtype=torch.long)
    completion_mask = torch.zeros((rows, length), dtype=torch.bool)
    old_logprobs = torch.zeros((rows, length))
    advantages = torch.zeros((rows, length))
    for r in range(rows):
        prompt, completion = list(prompt_ids[r]), list(completion_ids[r])
        n_p, n_c = len(prompt), len(completion)
        if len(completion_logprobs[r]) != n_c or len(completion_advantages[r]) != n_c:
            raise ValueError(
                f"step row {r}: completion_ids, completion_logprobs and completion_advantages differ in length"
            )
        input_ids[r, : n_p + n_c] = torch.tensor(prompt + completion)
        attention_mask[r, : n_p + n_c] = 1
        targets = slice(n_p - 1, n_p - 1 + n_c)  # logits at j predict token j+1
        completion_mask[r, targets] = True
        old_logprobs[r, targets] = torch.tensor(np.asarray(completion_logprobs[r], dtype=np.float32))
        advantages[r, targets] = torch.tensor(np.asarray(completion_advantages[r], dtype=np.float32))
    return PackedBatch(input_ids, attention_mask, completion_mask, old_logprobs, advantages)


def token_logprobs(
    model: torch.nn.Module, input_ids, attention_mask, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token and the entropy of each next-token distribution, (R, L) each."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()  # (R, L, V)
    if temperature > 0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    targets = torch.roll(input_ids, shifts=-1, dims=1)  # target at j is token j+1 (last column unused)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def clipped_pg_loss(
    logp, old_logp, advantages, mask, clip_eps: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The token-level clipped surrogate over `mask` positions; all inputs (R, L)."""
    log_ratio = (logp - old_logp).masked_fill(~mask, 0.0)
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
    n_tokens = mask.sum().clamp(min=1)
    loss = -(torch.minimum(unclipped, clipped) * mask).sum() / n_tokens
    with torch.no_grad():
        clip_fraction = (((ratio - 1).abs() > clip_eps) & mask).sum() / n_tokens
        approx_kl = (((ratio - 1) - log_ratio) * mask).sum() / n_tokens  # k3 estimator of KL(μ‖π)
    return loss, {"clip_fraction": float(clip_fraction), "approx_kl": float(approx_kl)}


def train(
    model: torch.nn.Module, batch: PackedBatch, config: TrainConfig, optimizer_state: dict | None = None
):
    """Run the update in place on `model`; return (per-step metrics, optimiser state)."""
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
        for group in optimizer.param_groups:
            group["lr"] = config.learning_rate
    generator = torch.Generator().manual_seed(config.seed)
    rows = batch.input_ids.shape[0]
    metrics = []
    for epoch in range(config.epochs):
        order = torch.randperm(rows, generator=generator)
        for part, mb_rows in enumerate(torch.tensor_split(order, min(config.minibatches, rows))):
            mb_mask = batch.completion_mask[mb_rows]
            length = int(batch.attention_mask[mb_rows].sum(1).max())  # trim padding columns
            logp, entropy = token_logprobs(
                model,
                batch.input_ids[mb_rows, :length],
                batch.attention_mask[mb_rows, :length],
                config.temperature,
            )
            mb_mask = mb_mask[:, :length]
            loss, stats = clipped_pg_loss(
                logp,
                batch.old_logprobs[mb_rows, :length],
                batch.advantages[mb_rows, :length],
                mb_mask,
                config.clip_eps,
            )
            n_tokens = int(mb_mask.sum())
            entropy_mean = (entropy * mb_mask).sum() / max(n_tokens, 1)
            if config.entropy_coef:
                loss = loss - config.entropy_coef * entropy_mean
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            failpoint("train:update")
            metrics.append(
                {
                    "epoch": epoch,
                    "minibatch": part,
                    "loss": float(loss.detach()),
                    "grad_norm": float(grad_norm),
                    "entropy": float(entropy_mean.detach()),
                    "tokens": n_tokens,
                    "rows": len(mb_rows),
                    **stats,
                }
            )
    model.eval()
    return metrics, optimizer.state_dict()
