"""Token-level clipped policy-gradient update on `completion_advantages`.

For every completion token t of every step row, with μ the sampling distribution that produced the
token (the engine's log-probs, same temperature and nucleus) and π_old the policy the round's rollouts stand
for, the PPO clipped surrogate (Schulman et al. 2017, Eq. 7) with ρ_t = π_θ(y_t | x, y_<t) / π_old(y_t |
…) is

    L = (1 / N) Σ_t [ − w_t · min(ρ_t · A_t, clip(ρ_t, 1 − ε, 1 + ε) · A_t)
                      + β_KL · k3(π_ref, π_θ)_t ]  −  β_H · (1 / N) Σ_t H_t,

summed over all N completion tokens of the minibatch ("token-level" aggregation, as in DAPO and
prime-rl, so long completions are not down-weighted). `A_t` is the step's advantage expanded per token.

- By default π_old = μ and w_t = 1: the ratio is taken against the sampler's own log-probs.
- Truncated importance sampling (`tis_cap` = C > 0; Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"): π_old is the trainer's log-prob before the update and
  w_t = min(π_old / μ, C) corrects for the sampler/trainer mismatch (different kernels, precision).
- Reference KL (`kl_coef` = β_KL > 0): k3(π_ref, π_θ) = e^d − d − 1 with d = log π_ref − log π_θ
  (Schulman's k3 estimator of KL(π_θ‖π_ref), as in GRPO, Shao et al. 2024, Eq. 4), π_ref the
  experiment's initial policy.
- The entropy bonus (β_H = `entropy_coef`, PPO's c₂ term) keeps a tiny policy from collapsing onto one
  action before it has found the reward.

Each minibatch is split into micro-batches of at most `micro_batch_tokens` padded tokens whose gradients
accumulate; every micro-batch's sum is divided by the minibatch's N, so the update is the same whatever
the split. Log-probs come from `creditline.train.logprobs` (completion positions only, chunked log-softmax).
On CUDA the forward pass runs under bf16 autocast (the log-softmax stays fp32). Every round logs the
sampler/trainer mismatch, KL(μ‖π_old) by k3 on the first minibatch before any update.

Optimiser: AdamW, `epochs` passes over the rows, each split into `minibatches` shuffled parts. The
trainer returns metrics and the optimiser state; it logs and writes nothing itself.

Under torchrun (an initialised process group of W > 1 ranks, `creditline.train.distributed`), rank r trains on
rows r::W of every minibatch, still dividing by the whole minibatch's N; the ranks' gradients and metric
sums are then summed, so every rank takes the one-process update (up to float summation order).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from creditline.config.stage_settings import TrainConfig
from creditline.faults import failpoint
from creditline.train.distributed import (
    clip_grad_norm,
    is_sharded,
    rank_and_size,
    sharded_optimizer_state,
    sum_rows,
    sum_update,
    whole_optimizer_state,
)
from creditline.train.logprobs import completion_logprobs
from creditline.train.training_loop import adamw, minibatch_updates


@dataclass(frozen=True)
class PackedBatch:
    """Right-padded prompt+completion sequences; `R` step rows, `L` the longest sequence."""

    input_ids: torch.Tensor  # (R, L) long
    attention_mask: torch.Tensor  # (R, L) long
    completion_mask: torch.Tensor  # (R, L) bool: True where the TARGET token at L index is a completion token
    old_logprobs: torch.Tensor  # (R, L) float: sampling log-prob μ of the target at that index
    advantages: torch.Tensor  # (R, L) float: per-token advantage of the target at that index
    reference_logprobs: torch.Tensor | None = None  # (R, L) float: log π_ref of the target, when KL is on


def pack(
    prompt_ids,
    completion_ids,
    completion_logprobs,
    completion_advantages,
    pad_token_id: int,
    sampled_masks=None,
) -> PackedBatch:
    """Pack per-row lists into tensors. Target index j holds token j+1's quantities (next-token).

    `sampled_masks[r]` (optional, one 0/1 per completion token) marks the tokens of row r that were
    sampled and are trained on; the others (an environment's reply inside a merged multi-turn row, see
    `creditline.rollout.turn_packing`) are context only. Without it every completion token is trained on.
    """
    rows = len(prompt_ids)
    n_p = np.fromiter(map(len, prompt_ids), dtype=np.int64, count=rows)  # (R,)
    n_c = np.fromiter(map(len, completion_ids), dtype=np.int64, count=rows)  # (R,)
    for name, values in (
        ("completion_logprobs", completion_logprobs),
        ("completion_advantages", completion_advantages),
        *((("sampled_mask", sampled_masks),) if sampled_masks is not None else ()),
    ):
        if bad := np.flatnonzero(np.fromiter(map(len, values), dtype=np.int64, count=rows) != n_c)[
            :1
        ].tolist():
            raise ValueError(f"step row {bad[0]}: completion_ids and {name} differ in length")
    if bad := np.flatnonzero((n_p == 0) & (n_c > 0))[:1].tolist():
        raise ValueError(
            f"step row {bad[0]}: empty prompt_ids (the first completion token has nothing to predict it)"
        )
    length = int((n_p + n_c).max())
    # every row's tokens laid end to end, and the (row, column) each one goes to
    tokens = np.fromiter(
        itertools.chain.from_iterable(
            itertools.chain(p, c) for p, c in zip(prompt_ids, completion_ids, strict=True)
        ),
        dtype=np.int64,
        count=int((n_p + n_c).sum()),
    )
    token_row, token_col = _positions(n_p + n_c, np.zeros(rows, dtype=np.int64))
    target_row, target_col = _positions(n_c, n_p - 1)  # logits at j predict token j+1
    input_ids = torch.full((rows, length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, length), dtype=torch.long)
    completion_mask = torch.zeros((rows, length), dtype=torch.bool)
    old_logprobs = torch.zeros((rows, length))
    advantages = torch.zeros((rows, length))
    input_ids[token_row, token_col] = torch.from_numpy(tokens)
    attention_mask[token_row, token_col] = 1
    completion_mask[target_row, target_col] = (
        True if sampled_masks is None else torch.from_numpy(_flat(sampled_masks, n_c, bool))
    )
    old_logprobs[target_row, target_col] = torch.from_numpy(_flat(completion_logprobs, n_c, np.float32))
    advantages[target_row, target_col] = torch.from_numpy(_flat(completion_advantages, n_c, np.float32))
    return PackedBatch(input_ids, attention_mask, completion_mask, old_logprobs, advantages)


def _positions(counts: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of `counts[r]` consecutive cells from column `starts[r]` in every row r, row-major."""
    row = np.repeat(np.arange(len(counts)), counts)
    offset = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return torch.from_numpy(row), torch.from_numpy(np.repeat(starts, counts) + offset)


def _flat(per_row, counts: np.ndarray, dtype) -> np.ndarray:
    """The rows' values end to end as one array (each row's list converted as `np.asarray(row, dtype)`)."""
    parts = [np.asarray(values, dtype=dtype) for values in per_row]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def micro_batches(lengths: torch.Tensor, token_budget: int) -> list[torch.Tensor]:
    """Split row indices (0..m−1) into groups whose padded size (rows × longest) fits `token_budget`.

    Rows are taken longest first, so rows of similar length share padding; a row longer than the
    budget goes alone. lengths: (m,) tokens per row.
    """
    order = torch.argsort(lengths, descending=True, stable=True).tolist()
    groups: list[list[int]] = []
    for index in order:
        longest = int(lengths[groups[-1][0]]) if groups else 0
        if groups and (len(groups[-1]) + 1) * longest <= token_budget:
            groups[-1].append(index)
        else:
            groups.append([index])
    return [torch.tensor(group) for group in groups]


def rank_micro_batches(
    lengths: torch.Tensor, rows: torch.Tensor, token_budget: int, lockstep: bool
) -> list[torch.Tensor | None]:
    """This rank's micro-batches of `rows` (its share, rows[rank::W]), as positions into rows[rank::W].

    With `lockstep` (a sharded model: every forward is a collective), the list is padded with None to the
    largest count any rank has, and each None is a pass that contributes nothing (`_idle_pass`).
    lengths: (R,) tokens of every row of the batch; rows: (m,) the step's rows, the same on every rank.
    """
    rank, world = rank_and_size()
    parts: list[torch.Tensor | None] = list(micro_batches(lengths[rows[rank::world]], token_budget))
    if lockstep:
        most = max(len(micro_batches(lengths[rows[r::world]], token_budget)) for r in range(world))
        parts += [None] * (most - len(parts))
    return parts


def clipped_pg_terms(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token −min(ρA, clip(ρ)A) and whether ρ lies outside the clip range; all (N,)."""
    ratio = (logp - old_logp).exp()
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    return -surrogate, ((ratio - 1).abs() > clip_eps).detach()


def k3(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(q‖p) from tokens sampled from q: e^d − d − 1, d = log p − log q.

    It is ≥ 0 for every d; computed near d = 0 it can round to −1e-11, so it is clamped at 0 (where its
    gradient e^d − 1 is ~0 anyway)."""
    d = log_p - log_q
    return (torch.expm1(d) - d).clamp(min=0.0)


def score(
    model: torch.nn.Module,
    batch: PackedBatch,
    temperature: float,
    config: TrainConfig = TrainConfig(),  # noqa: B008 (a frozen dataclass)
    top_p: float = 1.0,
) -> torch.Tensor:
    """The model's log-prob of every completion token, (R, L) on the CPU (0 elsewhere), no gradients.

    Gives π_old (truncated importance sampling) and π_ref (reference KL) in the batch's layout. Under
    torchrun each rank scores rows rank::W and the ranks' tables are summed."""
    rank, world = rank_and_size()
    out = torch.zeros(batch.old_logprobs.shape)
    mine = torch.arange(out.shape[0])[rank::world]  # (R / W,) this rank's rows
    all_rows = torch.arange(out.shape[0])
    with torch.no_grad():
        for local in rank_micro_batches(
            batch.attention_mask.sum(1), all_rows, config.micro_batch_tokens, is_sharded(model)
        ):
            if local is None:  # a sharded model's collectives need this rank's forward too
                rows_logprobs(model, batch, all_rows[:1], config, temperature, top_p)
                continue
            rows = mine[local]
            logp, _, mask, length = rows_logprobs(model, batch, rows, config, temperature, top_p)
            block = out[rows, :length]
            block[mask] = logp.cpu()
            out[rows, :length] = block
    return out if world == 1 else sum_rows(out, _device(model))


def train(
    model: torch.nn.Module,
    batch: PackedBatch,
    config: TrainConfig,
    temperature: float,
    seed: int,
    optimizer_state: dict | None = None,
    top_p: float = 1.0,
):
    """Run the update in place on `model`; return (per-update metrics, optimiser state).

    `temperature` and `top_p` are the sampling ones (the trainer's π_θ is the distribution the
    engine sampled from, so ρ compares like with like); `seed` orders the minibatches. With
    `kl_coef` > 0 the batch must carry `reference_logprobs`. Under torchrun every rank passes the
    whole batch and the same seed, and trains on its share of each minibatch (module docstring).
    """
    if config.kl_coef > 0 and batch.reference_logprobs is None:
        raise ValueError("kl_coef > 0 needs the batch's reference_logprobs (see `score`)")
    device = _device(model)
    rank, world = rank_and_size()
    trainer_old = score(model, batch, temperature, config, top_p) if config.tis_cap > 0 else None
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(  # type: ignore[operator]  # HF's method: torch's stub says Tensor
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    model.train()
    sharded = is_sharded(model)
    # sharded: the per-tensor AdamW
    # (CUDA's default multi-tensor one cannot mix DTensor blocks and whole tensors)
    if sharded and optimizer_state is not None:
        optimizer_state = sharded_optimizer_state(optimizer_state, list(model.parameters()))
    foreach = False if sharded else None
    optimizer = adamw(model.parameters(), config.learning_rate, config.weight_decay, optimizer_state, foreach)
    rows = batch.input_ids.shape[0]
    lengths = batch.attention_mask.sum(1)

    def accumulate(mb_rows: torch.Tensor) -> tuple[int, int, dict[str, float]]:
        """Add the minibatch's ∂L/∂θ to .grad, this rank's share of its rows; (N tokens, rows, loss sums)."""
        n_tokens = int(batch.completion_mask[mb_rows].sum())  # the whole minibatch's N, on every rank
        rank_rows = mb_rows[rank::world]  # this rank's share (all of them in one process)
        sums = dict.fromkeys(("loss", "entropy", "clipped", "approx_kl", "sampler_kl", "reference_kl"), 0.0)
        for local in rank_micro_batches(lengths, mb_rows, config.micro_batch_tokens, sharded):
            if local is None:
                _idle_pass(model, batch, mb_rows[:1], config, temperature, top_p)
                continue
            micro = rank_rows[local]
            logp, entropy, mask, length = rows_logprobs(
                model, batch, micro, config, temperature, top_p, entropy_grad=config.entropy_coef > 0
            )
            sampled = _select(batch.old_logprobs, micro, length, mask, device)
            old = sampled if trainer_old is None else _select(trainer_old, micro, length, mask, device)
            terms, clipped = clipped_pg_terms(
                logp, old, _select(batch.advantages, micro, length, mask, device), config.clip_eps
            )
            if trainer_old is not None:
                terms = terms * (old - sampled).exp().clamp(max=config.tis_cap)
            loss_sum = terms.sum()
            if config.kl_coef > 0:
                assert batch.reference_logprobs is not None  # refused on entry otherwise
                reference_kl = k3(_select(batch.reference_logprobs, micro, length, mask, device), logp)
                loss_sum = loss_sum + config.kl_coef * reference_kl.sum()
                sums["reference_kl"] += float(reference_kl.detach().sum())
            if config.entropy_coef > 0:
                loss_sum = loss_sum - config.entropy_coef * entropy.float().sum()
            (loss_sum / max(n_tokens, 1)).backward()
            detached = logp.detach()
            sums["loss"] += float(loss_sum.detach())
            sums["entropy"] += float(entropy.detach().float().sum())
            sums["clipped"] += float(clipped.sum())
            sampler_kl_sum = float(k3(detached, sampled).sum())  # KL(μ‖π_θ); π_θ = π_old at first
            sums["sampler_kl"] += sampler_kl_sum
            sums["approx_kl"] += (  # KL(π_old‖π_θ); π_old is μ without TIS
                sampler_kl_sum if trainer_old is None else float(k3(detached, old).sum())
            )
        if world > 1:  # every rank now holds the one-process gradient and sums
            sums = sum_update(model.parameters(), sums)
        return n_tokens, len(mb_rows), sums

    metrics, sampler_kl = [], None
    split = lambda order: torch.tensor_split(order, min(config.minibatches, rows))  # noqa: E731
    clip = clip_grad_norm if sharded else torch.nn.utils.clip_grad_norm_
    updates = minibatch_updates(
        optimizer, model.parameters, rows, config.epochs, seed, split, accumulate, config.max_grad_norm, clip
    )
    for update in updates:
        failpoint("train:update")
        n_tokens, n_rows, sums = update.result
        mean = {key: value / max(n_tokens, 1) for key, value in sums.items()}
        if sampler_kl is None:  # the first minibatch, before any update: the sampler/trainer mismatch
            sampler_kl = mean["sampler_kl"]
        metrics.append(
            {
                "epoch": update.epoch,
                "minibatch": update.minibatch,
                "loss": mean["loss"],
                "grad_norm": update.grad_norm,
                "entropy": mean["entropy"],
                "tokens": n_tokens,
                "rows": n_rows,
                "clip_fraction": mean["clipped"],
                "approx_kl": mean["approx_kl"],
                "reference_kl": mean["reference_kl"],
            }
        )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_disable()  # type: ignore[operator]  # HF's method: torch's stub says Tensor
    model.eval()
    # every update row carries the round's mismatch, so a reused training table still has it
    state = whole_optimizer_state(optimizer.state_dict()) if sharded else optimizer.state_dict()
    return [{**m, "sampler_kl": sampler_kl} for m in metrics], state


def _idle_pass(model, batch, rows, config, temperature, top_p) -> None:
    """A forward and backward that adds nothing (loss × 0): a sharded model's rank with fewer micro-batches
    than another takes part in the other's collectives (all-gathers, reduce-scatters) with it."""
    logp, _, _, _ = rows_logprobs(model, batch, rows, config, temperature, top_p)
    (logp.sum() * 0.0).backward()


def rows_logprobs(
    model: torch.nn.Module,
    batch: PackedBatch,
    rows: torch.Tensor,
    config: TrainConfig,
    temperature: float,
    top_p: float,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Log-probs (n,) fp32 and entropies (n,) of the completion tokens of `rows`, with their mask
    (len(rows), length) on the CPU and `length`, the longest of the rows (padding columns trimmed)."""
    length = int(batch.attention_mask[rows].sum(1).max())
    mask = batch.completion_mask[rows, :length]
    device = _device(model)
    with autocast_for(device, config.bf16):
        logp, entropy = completion_logprobs(
            model,
            batch.input_ids[rows, :length].to(device),
            batch.attention_mask[rows, :length].to(device),
            mask.to(device),
            temperature,
            config.logprob_chunk_tokens,
            entropy_grad=entropy_grad,
            top_p=top_p,
        )
    return logp.float(), entropy, mask, length


def _select(table: torch.Tensor, rows: torch.Tensor, length: int, mask: torch.Tensor, device) -> torch.Tensor:
    """(R, L) → the (n,) values of `rows` at `mask` positions (mask: (len(rows), length))."""
    return table[rows, :length][mask].to(device)


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast_for(device: torch.device, bf16: bool):
    """bf16 autocast on a CUDA device when `bf16` (the log-softmax stays fp32); no autocast elsewhere."""
    if device.type == "cuda" and bf16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
