"""The settings of the stages that run models: training, the warm start, branching, the step-reward model.

Each stage's code imports torch (and the reward model transformers), which takes seconds; its settings are
plain values. `creditline.config` needs only the settings, to check, hash and register a config, and every
command reads a config (`creditline report` too), so the settings live here, apart from the code, and
import nothing but the standard library and the config schema (pydantic: `creditline.config.schema`).
Each stage's module imports its settings from here and keeps them under its own name
(`creditline.train.trainer.TrainConfig` is this `TrainConfig`).

The names some fields choose from (prompt formats, sample filters) live here for the same reason: their
modules (`creditline.rollout.episodes`, `creditline.credit.sample_filter`) import pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from pydantic import Field, with_config

from creditline.config.schema import TABLE, Flag, Int, Number

PromptFormat = Literal["auto", "chat", "chat-last", "plain"]
"""`auto`: chat when the tokenizer has a chat template, plain otherwise (`creditline.rollout.episodes`)."""
PROMPT_FORMATS: tuple[str, ...] = get_args(PromptFormat)
CHAT_FORMATS = ("chat", "chat-last")
"""The formats rendered by the tokenizer's chat template."""
SampleFilter = Literal["none", "prof"]
"""The sample filters of `creditline.credit.sample_filter`."""
FILTERS: tuple[str, ...] = get_args(SampleFilter)
PointRule = Literal["none", "every", "uniform", "entropy"]
"""How `creditline.rollout.branching` chooses branch points."""
POINT_RULES: tuple[str, ...] = get_args(PointRule)
DEFAULT_CHUNK_TOKENS = 512
"""Completion positions whose full-vocabulary logits `creditline.train.logprobs` holds at once, by default."""


@with_config(TABLE)
@dataclass(frozen=True)
class TrainConfig:
    learning_rate: Annotated[Number, Field(gt=0, le=1)] = 2e-3
    """AdamW's step size."""
    epochs: Annotated[Int, Field(ge=1, le=1000)] = 2
    """Passes over the round's step rows."""
    minibatches: Annotated[Int, Field(ge=1, le=100_000)] = 4
    """Optimiser steps per epoch; rows are shuffled into this many parts (at most a round's episodes)."""
    clip_eps: Annotated[Number, Field(gt=0, le=1)] = 0.2
    """PPO clip range ε."""
    entropy_coef: Annotated[Number, Field(ge=0, le=1)] = 0.0
    """Weight β_H of the entropy bonus −β_H·H̄ (mean next-token entropy over completion tokens)."""
    max_grad_norm: Annotated[Number, Field(gt=0, le=1000)] = 1.0
    """Gradients are clipped to this global norm."""
    weight_decay: Annotated[Number, Field(ge=0, le=1)] = 0.0
    """AdamW's decoupled weight decay."""
    micro_batch_tokens: Annotated[Int, Field(ge=1, le=100_000_000)] = 16_384
    """Padded tokens (rows × longest row) per forward pass; larger minibatches accumulate gradients."""
    logprob_chunk_tokens: Annotated[Int, Field(ge=1, le=1_000_000)] = DEFAULT_CHUNK_TOKENS
    """Completion positions whose full-vocabulary logits exist at once (peak ≈ this × vocabulary
    floats)."""
    kl_coef: Annotated[Number, Field(ge=0, le=10)] = 0.0
    """β_KL of the k3 KL to the reference (initial) policy; 0 is off and loads no reference model."""
    tis_cap: Annotated[Number, Field(ge=0, le=1000)] = 0.0
    """C of truncated importance sampling, weight min(π_old/μ, C); 0 is off (ratio against μ)."""
    bf16: Flag = True
    """bf16 autocast of the forward pass on CUDA (log-softmax in fp32); no effect on CPU."""
    gradient_checkpointing: Flag = False
    """Recompute the transformer's activations in the backward pass (less memory, ~30 % more time)."""


@with_config(TABLE)
@dataclass(frozen=True)
class WarmStartSettings:
    episodes: Annotated[Int, Field(ge=0, le=100_000)] = 0
    """Demonstration episodes of random well-formed actions; 0 turns the warm start off."""
    epochs: Annotated[Int, Field(ge=1, le=100)] = 3
    """Passes over the demonstrations (one training row per episode)."""
    learning_rate: Annotated[Number, Field(gt=0, le=1)] = 3e-3
    """AdamW's step size."""
    batch_rows: Annotated[Int, Field(ge=1, le=100_000)] = 8
    """Training rows per optimiser step (a multi-turn chat episode is one row)."""


@with_config(TABLE)
@dataclass(frozen=True)
class BranchSettings:
    points: PointRule = "none"
    """Where to branch: "none" (off), "every" k steps, "uniform" draws, or the highest-"entropy" steps."""
    every: Annotated[Int, Field(ge=1, le=10_000)] = 2
    """k of "every": branch at steps k, 2k, … of each episode."""
    per_episode: Annotated[Int, Field(ge=1, le=10_000)] = 2
    """Branch points per episode for "uniform" and "entropy"."""
    continuations: Annotated[Int, Field(ge=1, le=1024)] = 2
    """K: continuations sampled from each branch point."""
    token_budget: Annotated[Int, Field(ge=0, le=1_000_000_000)] = 0
    """The most completion tokens the round's continuations may plan to sample (0: no limit)."""

    @property
    def enabled(self) -> bool:
        return self.points != "none"


@with_config(TABLE)
@dataclass(frozen=True)
class RewardModelSettings:
    """`[reward_model]`: how the step-reward model of `prime` and `spa` is trained each round."""

    learning_rate: Annotated[Number, Field(gt=0, le=1)] = 3e-4
    """AdamW's step size (PRIME: 1e-6, SPA-RL: 3e-6, on 3B-7B models; the tiny built-in policy needs far
    more)."""
    epochs: Annotated[Int, Field(ge=1, le=1000)] = 1
    """Passes over the round's episodes (PRIME: one update on each batch)."""
    minibatches: Annotated[Int, Field(ge=1, le=100_000)] = 4
    """Optimiser steps per epoch; episodes are shuffled into this many parts."""
    beta: Annotated[Number, Field(gt=0, le=100)] = 0.05
    """prime: β of the implicit reward β · log π_φ / π_ref (PRIME's 0.05)."""
    max_grad_norm: Annotated[Number, Field(gt=0, le=1000)] = 1.0
    micro_batch_tokens: Annotated[Int, Field(ge=1, le=100_000_000)] = 16_384
    """Padded tokens (rows × longest row) per forward pass."""
