"""The settings of the stages that run models: training, the warm start, branching, the step-reward model.

Each stage's code imports torch (and the reward model transformers), which takes seconds; its settings are
plain values. `creditline.config` needs only the settings, to check, hash and register a config, and every
command reads a config (`creditline report` too), so the settings live here, apart from the code, and
import nothing but the standard library. Each stage's module imports its settings from here and keeps
them under its own name (`creditline.train.trainer.TrainConfig` is this `TrainConfig`).

The names the `choices` of `creditline.config`'s fields are drawn from (prompt formats, sample filters)
live here for the same reason: their modules (`creditline.rollout.episodes`,
`creditline.credit.sample_filter`) import pandas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROMPT_FORMATS = ("auto", "chat", "chat-last", "plain")
"""`auto`: chat when the tokenizer has a chat template, plain otherwise (`creditline.rollout.episodes`)."""
CHAT_FORMATS = ("chat", "chat-last")
"""The formats rendered by the tokenizer's chat template."""
FILTERS = ("none", "prof")
"""The sample filters of `creditline.credit.sample_filter`."""
POINT_RULES = ("none", "every", "uniform", "entropy")
"""How `creditline.rollout.branching` chooses branch points."""
DEFAULT_CHUNK_TOKENS = 512
"""Completion positions whose full-vocabulary logits `creditline.train.logprobs` holds at once, by default."""


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
    """Weight β_H of the entropy bonus −β_H·H̄ (mean next-token entropy over completion tokens)."""
    max_grad_norm: float = field(default=1.0, metadata={"range": "(0, 1000]"})
    """Gradients are clipped to this global norm."""
    weight_decay: float = field(default=0.0, metadata={"range": "[0, 1]"})
    """AdamW's decoupled weight decay."""
    micro_batch_tokens: int = field(default=16_384, metadata={"range": "[1, 100_000_000]"})
    """Padded tokens (rows × longest row) per forward pass; larger minibatches accumulate gradients."""
    logprob_chunk_tokens: int = field(default=DEFAULT_CHUNK_TOKENS, metadata={"range": "[1, 1_000_000]"})
    """Completion positions whose full-vocabulary logits exist at once (peak ≈ this × vocabulary
    floats)."""
    kl_coef: float = field(default=0.0, metadata={"range": "[0, 10]"})
    """β_KL of the k3 KL to the reference (initial) policy; 0 is off and loads no reference model."""
    tis_cap: float = field(default=0.0, metadata={"range": "[0, 1000]"})
    """C of truncated importance sampling, weight min(π_old/μ, C); 0 is off (ratio against μ)."""
    bf16: bool = True
    """bf16 autocast of the forward pass on CUDA (log-softmax in fp32); no effect on CPU."""
    gradient_checkpointing: bool = False
    """Recompute the transformer's activations in the backward pass (less memory, ~30 % more time)."""


@dataclass(frozen=True)
class WarmStartSettings:
    episodes: int = field(default=0, metadata={"range": "[0, 100_000]"})
    """Demonstration episodes of random well-formed actions; 0 turns the warm start off."""
    epochs: int = field(default=3, metadata={"range": "[1, 100]"})
    """Passes over the demonstrations (one training row per episode)."""
    learning_rate: float = field(default=3e-3, metadata={"range": "(0, 1]"})
    """AdamW's step size."""
    batch_rows: int = field(default=8, metadata={"range": "[1, 100_000]"})
    """Training rows per optimiser step (a multi-turn chat episode is one row)."""


@dataclass(frozen=True)
class BranchSettings:
    points: str = field(default="none", metadata={"choices": POINT_RULES})
    """Where to branch: "none" (off), "every" k steps, "uniform" draws, or the highest-"entropy" steps."""
    every: int = field(default=2, metadata={"range": "[1, 10_000]"})
    """k of "every": branch at steps k, 2k, … of each episode."""
    per_episode: int = field(default=2, metadata={"range": "[1, 10_000]"})
    """Branch points per episode for "uniform" and "entropy"."""
    continuations: int = field(default=2, metadata={"range": "[1, 1024]"})
    """K: continuations sampled from each branch point."""
    token_budget: int = field(default=0, metadata={"range": "[0, 1_000_000_000]"})
    """The most completion tokens the round's continuations may plan to sample (0: no limit)."""

    @property
    def enabled(self) -> bool:
        return self.points != "none"


@dataclass(frozen=True)
class RewardModelSettings:
    """`[reward_model]`: how the step-reward model of `prime` and `spa` is trained each round."""

    learning_rate: float = field(default=3e-4, metadata={"range": "(0, 1]"})
    """AdamW's step size (PRIME: 1e-6, SPA-RL: 3e-6, on 3B-7B models; the tiny built-in policy needs far
    more)."""
    epochs: int = field(default=1, metadata={"range": "[1, 1000]"})
    """Passes over the round's episodes (PRIME: one update on each batch)."""
    minibatches: int = field(default=4, metadata={"range": "[1, 100_000]"})
    """Optimiser steps per epoch; episodes are shuffled into this many parts."""
    beta: float = field(default=0.05, metadata={"range": "(0, 100]"})
    """prime: β of the implicit reward β · log π_φ / π_ref (PRIME's 0.05)."""
    max_grad_norm: float = field(default=1.0, metadata={"range": "(0, 1000]"})
    micro_batch_tokens: int = field(default=16_384, metadata={"range": "[1, 100_000_000]"})
    """Padded tokens (rows × longest row) per forward pass."""
