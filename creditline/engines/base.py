"""The engine protocol: batched generation over token ids, returning sampling log-probs.

Both engines take prompts as token ids (the rollout loop owns tokenisation) and return, per prompt,
the completion token ids and the log-probability of each sampled token under the distribution it
was sampled from: `log_softmax(logits / temperature)` over the top-p nucleus
(`creditline.train.logprobs.nucleus_logits`; the whole vocabulary when top_p = 1; raw logits when greedy),
which is what vLLM reports as processed log-probs. The trainer computes
its ratio against exactly these numbers, with the same temperature. A completion stops at the
tokenizer's EOS (which is kept as the last completion token), at a stop string
(`creditline.engines.stop_strings`: the token that completes it is kept) or at `max_new_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 disables it."""
    max_new_tokens: int = 4
    seed: int = 0
    """Seed of this call's sampling; the same seed and prompts give the same completions."""
    stop: tuple[str, ...] = ()
    """Strings that end a completion (finish_reason "stop"), kept at the end of its text."""


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    """One per token of `token_ids`."""
    finish_reason: Literal["stop", "length"]


class Engine(Protocol):
    """Generates completions for a batch of tokenised prompts with one policy checkpoint."""

    eos_token_id: int

    @property
    def context_length(self) -> int | None:
        """The longest prompt + completion in tokens (None: unknown); read-only (an engine's property)."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]: ...
