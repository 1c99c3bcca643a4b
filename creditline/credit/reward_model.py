"""A step-reward model: a second small model, trained each round, whose per-step values add up to the outcome.

Two estimators of the literature get their step rewards this way
(`creditline.credit.advantages.model_reward`):

    prime   PRIME's implicit process reward model (Cui et al. 2025, arXiv 2502.01456): a causal LM π_φ next
            to a frozen reference π_ref; step t's value is v_t = β · Σ_{y ∈ step t} log π_φ(y) /
            π_ref(y) and the episode's Σ_t v_t is the logit of its success (`creditline.credit.implicit_prm`)
    spa     SPA-RL's progress estimator (Wang et al. 2025, arXiv 2505.20732): the transformer with a linear
            head on each step's last token gives ĉ_t = v_t, and Σ_t ĉ_t regresses the episode reward
            (`creditline.credit.progress_model`)

Both are "per-step values v_t whose episode sum z_e = Σ_{t ∈ e} v_t is fit to a target y_e", so one trainer
serves both; a kind says how v is computed from a step row and which loss L(z, y) ties the sum to the target.

Training, per round (`train_reward_model`): `epochs` passes over the round's episodes, each split into
`minibatches` shuffled parts, one AdamW step per part. The loss of a part of B episodes is
(1/B) Σ_e ℓ(z_e, y_e); an episode's steps may be many rows of many tokens, so the gradient is taken in two
passes that never hold a whole episode's graph: first every row's v without gradients gives z and
g_e = ∂L/∂z_e; then each micro-batch of rows back-propagates the surrogate Σ_r g_{e(r)} · v_r, whose
gradient is exactly ∂L/∂θ (chain rule through z_e = Σ v_r). Gradients are clipped to `max_grad_norm`.

The model is the experiment's initial policy at round 1 (a kind may add a head) and the previous round's
reward model after; each round's is saved as a HF folder (`creditline.policy.models.save_policy`) and recorded
in lineage as the round's `reward_model`, and its values on the round's steps as `model_rewards`
(`assets/reward_model`). The values are computed after the round's update (PRIME updates the PRM on the batch,
then scores it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from creditline.config.stage_settings import RewardModelSettings
from creditline.credit import implicit_prm, progress_model
from creditline.ids import derive_seed
from creditline.policy.hf import AutoModelForSequenceClassification
from creditline.policy.hf import logging as transformers_logging
from creditline.policy.models import load_policy, load_tokenizer
from creditline.train.trainer import PackedBatch, micro_batches, pack
from creditline.train.training_loop import adamw, minibatch_updates


@dataclass(frozen=True)
class RewardModelKind:
    """How one kind of step-reward model computes its values and ties their episode sum to a target."""

    name: str
    row_values: Callable[..., torch.Tensor]
    """(model, batch, rows, context) → v of those rows, (len(rows),), with gradients when enabled."""
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(z (B,), y (B,)) → the mean loss over the B episodes."""
    target: str
    """"success": the episode's success (episodes table); "episode_reward": the rubric's (scores table)."""
    head: bool
    """True: a `…ForSequenceClassification` with one label (a scalar head); False: the causal LM itself."""
    prepare: Callable[..., object] = lambda batch, settings, reference: None
    """(batch, settings, reference) → the context `row_values` needs (e.g. π_ref's log-probs)."""
    needs_reference: bool = False
    """True: training and scoring read a frozen reference model (the experiment's initial policy)."""

    @property
    def inputs(self) -> tuple[str, str]:
        """The round tables its training reads: the steps, and the table that holds the target."""
        return ("episodes", "steps") if self.target == "success" else ("steps", "scores")


KINDS: dict[str, RewardModelKind] = {
    "prime": RewardModelKind(
        "implicit_prm",
        implicit_prm.row_values,
        implicit_prm.loss,
        "success",
        head=False,
        prepare=implicit_prm.reference_logprobs,
        needs_reference=True,
    ),
    "spa": RewardModelKind(
        "progress", progress_model.row_values, progress_model.loss, "episode_reward", head=True
    ),
}
"""The estimators that read `model_reward`, and the model each one trains."""


def reward_model_kind(estimator: str) -> RewardModelKind | None:
    """The step-reward model `estimator` needs, or None (it reads none)."""
    return KINDS.get(estimator)


def load_reward_model(kind: RewardModelKind, folder: str | Path, seed: int, device: str = "cpu"):
    """(model, tokenizer) from a HF folder: the previous round's reward model, or the initial policy.

    A kind with a head started from a plain causal-LM folder gets a new head drawn from `seed` (the body's
    weights are the folder's); from its own earlier folder, the trained head is loaded.
    """
    if not kind.head:
        return load_policy(folder, device)
    tokenizer = load_tokenizer(folder)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # a new head is expected, not a load problem to report
    try:
        with torch.random.fork_rng(devices=[]):  # the head's draw leaves the global generator as it was
            torch.manual_seed(derive_seed(seed, "reward_model_head"))  # used only by a head not in the folder
            model = AutoModelForSequenceClassification.from_pretrained(
                folder, num_labels=1, dtype=torch.float32
            )
    finally:
        transformers_logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer


def step_batch(steps: pd.DataFrame, pad_token_id: int) -> PackedBatch:
    """The step rows right-padded into one batch (prompt + completion per row; no advantages)."""
    zeros = [np.zeros(len(c)) for c in steps["completion_ids"]]
    return pack(list(steps["prompt_ids"]), list(steps["completion_ids"]), zeros, zeros, pad_token_id)


def episode_codes(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(code per step row (S,) in [0, E), the E episode ids in first-seen order)."""
    codes, episode_ids = pd.factorize(steps["episode_id"])
    return codes.astype(np.int64), np.asarray(episode_ids)


def targets(
    kind: RewardModelKind, episode_ids: np.ndarray, episodes: pd.DataFrame, scores: pd.DataFrame
) -> np.ndarray:
    """y per episode, (E,) float64 in `episode_ids` order: its success or its rubric reward."""
    if kind.target == "success":
        return episodes.set_index("episode_id")["success"].reindex(episode_ids).to_numpy(dtype=np.float64)
    rewards = scores.drop_duplicates("episode_id").set_index("episode_id")["episode_reward"]
    return rewards.reindex(episode_ids).to_numpy(dtype=np.float64)


def all_row_values(
    kind: RewardModelKind, model: torch.nn.Module, batch: PackedBatch, context, token_budget: int
) -> np.ndarray:
    """v of every row of `batch`, (R,) float64, without gradients."""
    rows = np.arange(batch.input_ids.shape[0])
    return row_values_without_grad(kind, model, batch, rows, context, token_budget).numpy()


def row_values_without_grad(
    kind: RewardModelKind,
    model: torch.nn.Module,
    batch: PackedBatch,
    rows: np.ndarray,
    context,
    token_budget: int,
) -> torch.Tensor:
    """v of `rows` (r,) float64 on the CPU, in micro-batches of at most `token_budget` padded tokens, eval
    mode."""
    values = torch.zeros(len(rows), dtype=torch.float64)
    model.eval()  # no dropout: training's two passes must see the same function
    with torch.no_grad():
        for micro in micro_batches(batch.attention_mask.sum(1)[rows], token_budget):
            values[micro] = (
                kind.row_values(model, batch, torch.from_numpy(rows[micro.numpy()]), context).double().cpu()
            )
    return values


def train_reward_model(
    kind: RewardModelKind,
    model: torch.nn.Module,
    batch: PackedBatch,
    episode_of_row: np.ndarray,
    target: np.ndarray,
    settings: RewardModelSettings,
    seed: int,
    context=None,
    optimizer_state: dict | None = None,
) -> tuple[list[dict], dict]:
    """Fit Σ_{t ∈ e} v_t to y_e in place on `model`; (metrics per update, optimiser state).

    batch: the round's R step rows; episode_of_row: (R,) code in [0, E); target: (E,) y per episode;
    context: `kind.prepare`'s (computed once by the caller, who scores the rows with it afterwards).
    """
    if not np.isfinite(target).all():
        bad = int(np.flatnonzero(~np.isfinite(target))[0])
        raise ValueError(f"reward model: episode {bad}'s target ({kind.target}) is not a finite number")
    optimizer = adamw(model.parameters(), settings.learning_rate, 0.0, optimizer_state)
    n_episodes = len(target)
    by_episode = np.argsort(episode_of_row, kind="stable")  # rows grouped by episode
    rows_of = np.split(by_episode, np.cumsum(np.bincount(episode_of_row, minlength=n_episodes))[:-1])  # (E,)

    def accumulate(chosen: np.ndarray) -> tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add the part's ∂L/∂θ to .grad; (episodes, rows, L, z, y)."""
        rows = np.concatenate([rows_of[e] for e in chosen])  # the part's step rows
        local = np.repeat(np.arange(len(chosen)), [len(rows_of[e]) for e in chosen])  # row → part episode
        y = torch.from_numpy(target[chosen])
        loss, z = accumulate_gradient(
            kind, model, batch, rows, local, y, context, settings.micro_batch_tokens
        )
        return len(chosen), len(rows), loss, z, y

    split = lambda order: np.array_split(order.numpy(), min(settings.minibatches, n_episodes))  # noqa: E731
    updates = minibatch_updates(
        optimizer,
        model.parameters,
        n_episodes,
        settings.epochs,
        seed,
        split,
        accumulate,
        settings.max_grad_norm,
    )
    metrics = []
    for update in updates:
        episodes, rows, loss, z, y = update.result
        metrics.append(
            {
                "epoch": update.epoch,
                "minibatch": update.minibatch,
                "loss": float(loss),
                "grad_norm": update.grad_norm,
                "episodes": episodes,
                "rows": rows,
                "sum_mean": float(z.mean()),
                "target_mean": float(y.mean()),
            }
        )
    model.eval()
    return metrics, optimizer.state_dict()


def accumulate_gradient(
    kind: RewardModelKind,
    model: torch.nn.Module,
    batch: PackedBatch,
    rows: np.ndarray,
    local: np.ndarray,
    y: torch.Tensor,
    context,
    token_budget: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add ∂L/∂θ of one part to the parameters' .grad, in micro-batches of rows; (L, z) detached.

    rows: (r,) the part's step rows in `batch`; local: (r,) each row's episode in [0, B); y: (B,) targets.
    Pass 1 (no gradients) gives z_e = Σ v and g = ∂L/∂z; pass 2 back-propagates Σ_r g_{e(r)} · v_r per
    micro-batch, whose gradient is ∂L/∂θ by the chain rule.
    """
    device = next(model.parameters()).device
    values = row_values_without_grad(kind, model, batch, rows, context, token_budget)  # pass 1
    z = torch.zeros(len(y), dtype=torch.float64).index_add_(0, torch.from_numpy(local), values)
    z.requires_grad_(True)
    loss = kind.loss(z, y)
    (grad_z,) = torch.autograd.grad(loss, z)
    for micro in micro_batches(batch.attention_mask.sum(1)[rows], token_budget):  # pass 2: the surrogate
        v = kind.row_values(model, batch, torch.from_numpy(rows[micro.numpy()]), context)
        (grad_z[torch.from_numpy(local[micro.numpy()])].to(device=device, dtype=v.dtype) * v).sum().backward()
    return loss.detach(), z.detach()
