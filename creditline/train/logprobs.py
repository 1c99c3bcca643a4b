"""Log-probabilities of the completion tokens under a causal LM, without the full-vocabulary tensor.

The trainer needs, for each completion token y_t of each row, log π(y_t | x, y_<t) at temperature T:

    log π_T(y_t) = z_t[y_t] / T − logsumexp(z_t / T),     z_t = W · h_t      (W: the LM head, (V, H))

and the entropy H_t = logsumexp(z_t / T) − Σ_v softmax(z_t / T)_v · z_t[v] / T where the loss uses it.
Materialising z for every position of an (R, L) batch costs R·L·V floats several times over (logits,
log-softmax, its exponent): at V = 151,936 and 8 rows of 1,024 tokens that is 5 GB per copy in fp32.
Only completion positions need it, and not all at once:

1. run the model's body once, giving hidden states h (R, L, H) (the LM head is not applied);
2. gather the N completion positions, h[mask] (N, H), and their targets (N,);
3. apply the LM head to `chunk_tokens` positions at a time, take the fp32 log-softmax of the target and
   the entropy, and drop the chunk's logits. Each chunk runs under activation checkpointing, so the
   backward pass recomputes its logits instead of keeping them: the peak is chunk_tokens · V floats.

Nucleus sampling (`top_p` < 1) samples from the renormalised nucleus, and vLLM's processed log-probs
are taken over it (temperature first, then the tokens outside the smallest set of mass ≥ top_p set to
−∞, then log-softmax). `nucleus_logits` is that rule; the engines and the trainer all apply it, so the
sampler's μ and the trainer's π_θ are the same distribution. In the trainer the mask is taken from the
current logits without gradient, and the sampled token is always kept (after an update it may have
left the nucleus; its log-prob then stays finite).

`full_vocab_logprobs` is the plain path (all positions, whole vocabulary), kept as the reference the
tests and `bench/trainer.py` compare against. A model without a separable body and head (no
`get_decoder()`) falls back to it.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from creditline.config.stage_settings import DEFAULT_CHUNK_TOKENS


def target_ids(input_ids: torch.Tensor) -> torch.Tensor:
    """(R, L) → (R, L): the token each position predicts (position j predicts token j + 1; the last
    column's target is meaningless and never selected)."""
    return torch.roll(input_ids, shifts=-1, dims=1)


def nucleus_logits(logits: torch.Tensor, top_p: float, keep: torch.Tensor | None = None) -> torch.Tensor:
    """(B, V) logits with the tokens outside the top-p nucleus at −∞ (unchanged when top_p ≥ 1).

    A token is outside when the mass of the tokens more likely than it already exceeds top_p. `keep`
    (B,) names one token per row that stays whatever its mass."""
    if top_p >= 1.0:
        return logits
    with torch.no_grad():
        probs = torch.softmax(logits.float(), dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside_sorted = sorted_probs.cumsum(-1) - sorted_probs > top_p
        outside = torch.zeros_like(outside_sorted).scatter(-1, order, outside_sorted)
        if keep is not None:
            outside[torch.arange(outside.shape[0], device=outside.device), keep] = False
    return logits.masked_fill(outside, float("-inf"))


def completion_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    target_mask: torch.Tensor,
    temperature: float,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    entropy_grad: bool = False,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob and entropy at the `target_mask` positions, each (N,) in row-major order, under the
    sampling distribution at `temperature` and `top_p`.

    input_ids, attention_mask: (R, L); target_mask: (R, L) bool, True where position j's next token
    is a completion token. The entropy carries gradients only when `entropy_grad` (an entropy bonus
    in the loss); otherwise it is a detached metric.
    """
    decoder, head = _body_and_head(model)
    if decoder is None or head is None:  # both or neither
        logp, entropy = full_vocab_logprobs(model, input_ids, attention_mask, temperature, top_p)
        return logp[target_mask], (entropy[target_mask] if entropy_grad else entropy[target_mask].detach())
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (R, L, H)
    selected = hidden[target_mask]  # (N, H)
    targets = target_ids(input_ids)[target_mask]  # (N,)
    logps, entropies = [], []
    for start in range(0, selected.shape[0], chunk_tokens):
        h, y = selected[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        if torch.is_grad_enabled() and h.requires_grad:
            logp, entropy = checkpoint(
                _chunk, head, h, y, temperature, top_p, entropy_grad, use_reentrant=False
            )
        else:
            logp, entropy = _chunk(head, h, y, temperature, top_p, entropy_grad)
        logps.append(logp)
        entropies.append(entropy)
    if not logps:
        empty = selected.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(entropies)


def _chunk(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_p: float,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, H), (C,) → log π_T(target) (C,) and entropy (C,), from fp32 logits of this chunk only."""
    logits = head(hidden).float()  # (C, V)
    if temperature > 0:
        logits = nucleus_logits(logits / temperature, top_p, keep=targets)
    normaliser = torch.logsumexp(logits, dim=-1)  # (C,)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - normaliser
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        probs = torch.softmax(logits, dim=-1)
        entropy = normaliser - (probs * logits.masked_fill(probs == 0, 0.0)).sum(-1)  # 0 · (−∞) is 0
        entropy = entropy.clamp(min=0.0)  # ≥ 0; a near one-hot distribution can round to −1e-7
    return logp, entropy if entropy_grad else entropy.detach()


def _body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module | None, torch.nn.Module | None]:
    """The transformer body (returns `last_hidden_state`, final norm applied) and the LM head."""
    get_decoder = getattr(model, "get_decoder", None)
    # an HF model's method, which torch's `Module.__getattr__` stub types as `Tensor | Module`
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None  # type: ignore[operator]
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or head is None or decoder is model:
        return None, None
    return decoder, head


def full_vocab_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference path: log-prob of each next token and each next-token entropy, (R, L) each,
    from the (R, L, V) fp32 logits of every position."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()  # (R, L, V)
    targets = target_ids(input_ids)
    if temperature > 0:
        rows, length, vocab = logits.shape
        logits = nucleus_logits((logits / temperature).reshape(-1, vocab), top_p, keep=targets.reshape(-1))
        logits = logits.reshape(rows, length, vocab)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all.masked_fill(logp_all == float("-inf"), 0.0)).sum(-1)
    return logp, entropy.clamp(min=0.0)
