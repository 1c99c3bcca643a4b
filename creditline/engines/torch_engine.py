"""`TorchEngine`: batched sampling with a transformers causal LM and its KV cache, on CPU or GPU.

All prompts of a call are decoded together: left-padded into one `(B, L)` batch, one forward pass
over the prompts fills the KV cache, then one forward pass per new token for the whole batch. Rows
that have emitted EOS or completed a stop string keep being fed padding (masked out) until every row is
done or `max_new_tokens` is reached; they are still sampled (and the sample dropped), so a row's tokens do
not depend on when the others stop. Sampling uses a `torch.Generator` seeded from `SamplingParams.seed`,
so a call is reproducible without touching global RNG state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from creditline.engines.base import Completion, SamplingParams
from creditline.engines.stop_strings import StopStringWatch
from creditline.train.logprobs import nucleus_logits


class TorchEngine:
    def __init__(
        self,
        model: torch.nn.Module,
        eos_token_id: int,
        pad_token_id: int,
        device: str = "cpu",
        tokenizer=None,
    ):
        """`tokenizer` decodes completions for stop strings; without one, `SamplingParams.stop` is refused."""
        self.model = model.to(device).eval()
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.device = device
        self.tokenizer = tokenizer

    @classmethod
    def from_checkpoint(cls, folder: str | Path, device: str = "cpu") -> TorchEngine:
        from creditline.policy.models import load_policy

        model, tokenizer = load_policy(folder, device)
        return cls(model, tokenizer.eos_token_id, tokenizer.pad_token_id, device, tokenizer)

    @property
    def context_length(self) -> int | None:
        """The longest prompt + completion the model takes (its position embeddings), if it says."""
        return getattr(self.model.config, "max_position_embeddings", None)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        if not prompts:
            return []
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine's tokenizer: TorchEngine(..., tokenizer=...)")
        context = self.context_length
        for row, prompt in enumerate(prompts):
            if context is not None and len(prompt) + params.max_new_tokens > context:
                raise ValueError(
                    f"prompt {row}: {len(prompt)} tokens + max_new_tokens {params.max_new_tokens} "
                    f"exceed the model's context of {context} tokens"
                )
        b = len(prompts)
        length = max(len(p) for p in prompts)
        input_ids = torch.full((b, length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((b, length), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: the last column is every row's newest token
            input_ids[row, length - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, length - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        generator = torch.Generator(self.device).manual_seed(params.seed)

        out = self.model(  # only the last position's logits: the prompt's others are never used
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]  # (B, V)
        position = position_ids[:, -1:]  # (B, 1)
        finished = torch.zeros(b, dtype=torch.bool, device=self.device)
        lengths = [params.max_new_tokens] * b  # a row's completion length, once it has stopped
        stopped = [False] * b
        watch = StopStringWatch(self.tokenizer, params.stop, b) if params.stop else None
        tokens, logprobs = [], []  # each (B,) per generated position
        for _ in range(params.max_new_tokens):
            token, logprob = _sample(logits, params, generator)
            token = torch.where(finished, torch.full_like(token, self.pad_token_id), token)
            tokens.append(token)
            logprobs.append(logprob)
            ends = ~finished & (token == self.eos_token_id)
            if watch is not None:
                ends = ends | watch.hits(token.cpu(), finished.cpu()).to(self.device)
            for row in ends.nonzero().flatten().tolist():
                lengths[row], stopped[row] = len(tokens), True
            finished = finished | ends
            if bool(finished.all()) or len(tokens) == params.max_new_tokens:
                break
            attention_mask = torch.cat([attention_mask, (~finished).long()[:, None]], dim=1)
            position = position + 1
            out = self.model(
                input_ids=token[:, None],
                attention_mask=attention_mask,
                position_ids=position,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
        rows = zip(
            torch.stack(tokens, 1).tolist(), torch.stack(logprobs, 1).tolist(), lengths, stopped, strict=True
        )
        return [
            Completion(token_ids=ids[:n], logprobs=lps[:n], finish_reason="stop" if stop else "length")
            for ids, lps, n, stop in rows
        ]


def _sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from `logits` (B, V); return it and its log-prob (B,), (B,)."""
    logits = logits.float()
    if params.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = logp.argmax(dim=-1)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)
    logp = torch.log_softmax(nucleus_logits(logits / params.temperature, params.top_p), dim=-1)  # (B, V)
    token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)
