import pytest
import torch

from creditline.engines import SamplingParams, TorchEngine
from creditline.rollout.episodes import encode_prompt
from creditline.train.trainer import pack, score


def make_engine(tiny_policy):
    model, tokenizer = tiny_policy
    return TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id), tokenizer


def test_same_seed_same_completions_and_different_seed_differs(tiny_policy):
    engine, tokenizer = make_engine(tiny_policy)
    prompts = [encode_prompt(tokenizer, "pos 1 2 key 3 4 door 0 0 have no")] * 16
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=3)
    first, second = engine.generate(prompts, params), engine.generate(prompts, params)
    assert first == second
    other = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=4, seed=4))
    assert [c.token_ids for c in other] != [c.token_ids for c in first]


def test_kv_cache_with_left_padding_matches_a_full_forward(tiny_policy):
    """Sampling log-probs from the cached, left-padded batch equal a plain forward over each sequence."""
    engine, tokenizer = make_engine(tiny_policy)
    model = tiny_policy[0]
    prompts = [
        encode_prompt(tokenizer, "1 + 2 ="),
        encode_prompt(tokenizer, "pos 1 2 key 3 4 door 0 0 have no"),
    ]
    completions = engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=5, seed=1))
    for prompt, completion in zip(prompts, completions, strict=True):
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0] / 0.7, dim=-1)
        expected = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion.token_ids)]
        assert torch.allclose(torch.tensor(completion.logprobs), torch.tensor(expected), atol=1e-4)


def test_greedy_picks_the_argmax_and_stops_at_eos(tiny_policy):
    engine, tokenizer = make_engine(tiny_policy)
    model = tiny_policy[0]
    prompt = encode_prompt(tokenizer, "pos 0 0 key 1 1 door 2 2 have no")
    completion = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=1))[0]
    with torch.no_grad():
        expected = int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmax())
    assert completion.token_ids == [expected]


def test_a_completion_ends_at_its_first_eos_or_runs_to_the_limit(tiny_policy):
    engine, tokenizer = make_engine(tiny_policy)
    prompts = [encode_prompt(tokenizer, "pos 1 2 key 3 4 door 0 0 have no")] * 64
    completions = engine.generate(prompts, SamplingParams(temperature=3.0, max_new_tokens=6, seed=0))
    eos = tokenizer.eos_token_id
    stopped = [c for c in completions if c.finish_reason == "stop"]
    cut = [c for c in completions if c.finish_reason == "length"]
    assert stopped and cut  # both kinds occur at this temperature, so both are checked
    for c in stopped:
        assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1] and len(c.logprobs) == len(c.token_ids)
    for c in cut:
        assert len(c.token_ids) == 6 and eos not in c.token_ids and len(c.logprobs) == 6


def test_top_p_keeps_only_the_nucleus(tiny_policy):
    engine, tokenizer = make_engine(tiny_policy)
    model = tiny_policy[0]
    prompt = encode_prompt(tokenizer, "pos 3 3 key 1 0 door 4 2 have yes")
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], dim=-1)
    order = probs.argsort(descending=True)
    top_p = float(probs[order[0]] + probs[order[1]]) - 1e-6  # nucleus = the two most likely tokens
    allowed = {int(order[0]), int(order[1])}
    completions = engine.generate(
        [prompt] * 200, SamplingParams(temperature=1.0, top_p=top_p, max_new_tokens=1, seed=0)
    )
    assert {c.token_ids[0] for c in completions} <= allowed
    # the reported log-prob is over the renormalised nucleus (vLLM's processed log-probs): p / (p0 + p1)
    for completion in completions[:5]:
        token = completion.token_ids[0]
        expected = float(torch.log(probs[token] / (probs[order[0]] + probs[order[1]])))
        assert completion.logprobs[0] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_the_trainer_scores_sampled_tokens_as_the_engine_reported_them(tiny_policy, top_p):
    """μ (engine) and π_θ (trainer, before any update) are one distribution: equal log-probs per token."""
    engine, tokenizer = make_engine(tiny_policy)
    prompts = [
        encode_prompt(tokenizer, text)
        for text in ["go key left 2 down 1", "pos 1 1 key 2 2 door 3 3 have no"]
    ]
    completions = engine.generate(
        prompts * 4, SamplingParams(temperature=0.8, top_p=top_p, max_new_tokens=5, seed=3)
    )
    batch = pack(prompts * 4, [c.token_ids for c in completions], [c.logprobs for c in completions],
                 [[0.0] * len(c.token_ids) for c in completions], tokenizer.pad_token_id)  # fmt: skip
    trainer = score(tiny_policy[0], batch, temperature=0.8, top_p=top_p)
    torch.testing.assert_close(trainer[batch.completion_mask], batch.old_logprobs[batch.completion_mask],
                               atol=1e-5, rtol=1e-5)  # fmt: skip


def test_a_prompt_longer_than_the_context_is_refused_naming_the_row(tiny_policy):
    engine, tokenizer = make_engine(tiny_policy)
    short, long_ = encode_prompt(tokenizer, "go key left 2 down 1"), [tokenizer.bos_token_id] * 62
    with pytest.raises(
        ValueError, match=r"prompt 1: 62 tokens \+ max_new_tokens 4 exceed the model's context of 64"
    ):
        engine.generate([short, long_], SamplingParams(max_new_tokens=4))
