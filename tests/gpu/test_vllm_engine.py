"""The vLLM engine against the torch engine on the same checkpoint (needs CUDA and `creditline[vllm]`)."""

import pytest

pytestmark = pytest.mark.gpu


def test_vllm_greedy_matches_torch_greedy(tiny_policy_dir):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm")
    from creditline.engines import SamplingParams, TorchEngine
    from creditline.engines.vllm_engine import VLLMEngine
    from creditline.policy import load_tokenizer
    from creditline.rollout import encode_prompt

    tokenizer = load_tokenizer(tiny_policy_dir)
    prompts = [encode_prompt(tokenizer, f"pos {x} 1 key 2 3 door 4 0 have no last none") for x in range(5)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    expected = TorchEngine.from_checkpoint(tiny_policy_dir, "cuda").generate(prompts, greedy)
    actual = VLLMEngine.shared(tiny_policy_dir).generate(prompts, greedy)  # one sleep-mode engine a process
    assert [c.token_ids for c in actual] == [c.token_ids for c in expected]
    for a, e in zip(actual, expected, strict=True):
        assert a.logprobs == pytest.approx(e.logprobs, abs=1e-2)


def test_vllm_samples_a_groups_identical_prompts_independently(tiny_policy_dir):
    """One seed for the whole batch would make every sample of a group (identical prompts) the same."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm")
    from creditline.engines import SamplingParams
    from creditline.engines.vllm_engine import VLLMEngine
    from creditline.policy import load_tokenizer
    from creditline.rollout import encode_prompt

    prompt = encode_prompt(load_tokenizer(tiny_policy_dir), "pos 1 1 key 2 3 door 4 0 have no last none")
    engine = VLLMEngine.shared(tiny_policy_dir)
    sampled = engine.generate([prompt] * 16, SamplingParams(temperature=1.0, max_new_tokens=3, seed=7))
    assert len({tuple(c.token_ids) for c in sampled}) > 1
    again = engine.generate([prompt] * 16, SamplingParams(temperature=1.0, max_new_tokens=3, seed=7))
    assert [c.token_ids for c in again] == [c.token_ids for c in sampled]  # still reproducible
