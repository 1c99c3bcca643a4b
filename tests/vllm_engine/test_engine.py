"""`VLLMEngine` against the trainer, itself and fresh engines: the numbers a round trains on.

- The trainer's log-probs of the tokens vLLM sampled (the π_old of the ratio) equal vLLM's processed
  log-probs (the μ it sampled from) under temperature and top-p.
- The rows of a group (identical prompts) are sampled independently, and the same seed gives the same rows.
- One engine reloaded through three rounds samples from each round's checkpoint (the trainer on it scores the
  samples as vLLM did), for an LM head of its own and for one tied to the embeddings (vLLM's own CPU reload
  keeps the old tied head; `creditline.engines.vllm_reload` re-packs it); after the last reload the tied
  engine samples exactly what a freshly built engine samples.
"""

from __future__ import annotations

import pytest
import torch

from creditline.engines import SamplingParams
from creditline.engines.vllm_engine import VLLMEngine
from creditline.policy.models import load_policy, load_tokenizer
from creditline.rollout.episodes import encode_prompt
from creditline.train.trainer import pack, score

from .conftest import SETTINGS

pytestmark = pytest.mark.slow
TEXTS = {
    "untied": ["pos 1 1 key 2 3 door 4 0 have no last none", "pos 3 2 key 0 1 door 4 4 have key last up",
               "pos 0 0 key 4 4 door 2 2 have no last down", "pos 2 2 key 1 1 door 3 3 have key last left"],
    "tied": ["What is 2 + 3? Use the add tool.", "Add 7 and 5.", "what is 12 + 30?", "Compute 1 + 1 please."],
}  # fmt: skip
SAMPLED = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=12, seed=5)
FLOAT16_SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
"""How test_in_process.py's float16 engine samples (8 copies of the prompts)."""
LOGPROB_TOLERANCE = 1e-4
"""Largest |trainer − vLLM| log-prob allowed, float32. Measured on the CPU over 8 copies of these prompts ×
12 tokens at the three (temperature, top-p) below: at most 4.8e-7 (untied) and 1.1e-5 (tied), medians ≤ 2.7e-7."""


def prompts(kind: str, folder, copies: int = 2) -> list[list[int]]:
    tokenizer = load_tokenizer(folder)
    return [encode_prompt(tokenizer, text) for text in TEXTS[kind]] * copies


@pytest.mark.parametrize("kind", ["untied", "tied"])
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.8, 0.9), (0.6, 0.7)])
def test_the_trainer_scores_vllms_samples_as_vllm_did(request, kind, temperature, top_p):
    engine = request.getfixturevalue(f"{kind}_engine")
    folder = request.getfixturevalue(f"{kind}_checkpoints")[0]
    engine.load(folder)
    rows = prompts(kind, folder)
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=12, seed=3)
    completions = engine.generate(rows, params)
    model, tokenizer = load_policy(folder)
    batch = pack(rows, [c.token_ids for c in completions], [c.logprobs for c in completions],
                 [[0.0] * len(c.token_ids) for c in completions], tokenizer.pad_token_id)  # fmt: skip
    trainer = score(model, batch, temperature, top_p=top_p)[batch.completion_mask]  # (N,)
    sampler = batch.old_logprobs[batch.completion_mask]  # (N,)
    assert sampler.numel() >= len(rows) and torch.isfinite(sampler).all()
    gap = (trainer - sampler).abs()
    # The nucleus is cut by the same rule on both sides (`nucleus_logits`, vLLM's top-p): no token was seen
    # inside one cut and outside the other, so top-p < 1 agrees as closely as whole-vocabulary sampling.
    assert gap.max() < LOGPROB_TOLERANCE and gap.median() < 1e-5, gap


def test_a_groups_rows_differ_and_the_seed_reproduces_them(untied_engine, untied_checkpoints):
    untied_engine.load(untied_checkpoints[0])
    group = prompts("untied", untied_checkpoints[0], copies=1)[:1] * 16  # G = 16 samples of one task
    sampled = untied_engine.generate(group, SAMPLED)
    assert len({tuple(c.token_ids) for c in sampled}) > 8
    again = untied_engine.generate(group, SAMPLED)
    assert [c.token_ids for c in again] == [c.token_ids for c in sampled]
    assert [c.logprobs for c in again] == [c.logprobs for c in sampled]
    other = untied_engine.generate(group, SamplingParams(**{**SAMPLED.__dict__, "seed": 6}))
    assert [c.token_ids for c in other] != [c.token_ids for c in sampled]


@pytest.mark.parametrize("kind", ["untied", "tied"])
def test_one_engine_reloaded_over_three_rounds_samples_each_rounds_checkpoint(request, kind):
    """Rounds 1-3 reload into round 0's engine. After each reload the trainer, on that round's checkpoint,
    scores what the engine sampled as the engine did (a head left from an earlier round would be off by far
    more than the tolerance); for the tied head, whose reload `vllm_reload` re-packs, a fresh engine built on
    the last checkpoint also samples exactly the same tokens (engine builds are the slow part: one)."""
    engine = request.getfixturevalue(f"{kind}_engine")
    folders = request.getfixturevalue(f"{kind}_checkpoints")
    rows = prompts(kind, folders[0])
    engine.load(folders[0])
    for folder in folders[1:]:
        engine.load(folder, content_hash=folder.name)
        reloaded = engine.generate(rows, SAMPLED)
        model, tokenizer = load_policy(folder)
        batch = pack(rows, [c.token_ids for c in reloaded], [c.logprobs for c in reloaded],
                     [[0.0] * len(c.token_ids) for c in reloaded], tokenizer.pad_token_id)  # fmt: skip
        trainer = score(model, batch, SAMPLED.temperature, top_p=SAMPLED.top_p)[batch.completion_mask]
        gap = (trainer - batch.old_logprobs[batch.completion_mask]).abs()
        assert gap.max() < LOGPROB_TOLERANCE, (folder.name, gap.max())
    if kind == "untied":
        return
    fresh_engine = VLLMEngine(folders[-1], SETTINGS)
    try:
        fresh = fresh_engine.generate(rows, SAMPLED)
    finally:
        fresh_engine.close()
    assert [c.token_ids for c in reloaded] == [c.token_ids for c in fresh]
    for a, b in zip(reloaded, fresh, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)


def test_the_shared_engine_is_reloaded_by_folder_and_hash(untied_engine, untied_checkpoints):
    rows = prompts("untied", untied_checkpoints[0])
    assert VLLMEngine.shared(untied_checkpoints[0], SETTINGS, content_hash="a") is untied_engine
    before = untied_engine.generate(rows, SAMPLED)
    assert VLLMEngine.shared(untied_checkpoints[1], SETTINGS, content_hash="b") is untied_engine
    assert untied_engine.folder == str(untied_checkpoints[1])
    assert [c.token_ids for c in untied_engine.generate(rows, SAMPLED)] != [c.token_ids for c in before]
    untied_engine.release()  # a CPU has no sleep mode: nothing is freed and the engine stays as it is
    assert untied_engine.asleep == untied_engine.can_sleep == (SETTINGS.device != "cpu")
    VLLMEngine.shared(untied_checkpoints[0], SETTINGS, content_hash="a")
    assert [c.token_ids for c in untied_engine.generate(rows, SAMPLED)] == [c.token_ids for c in before]
