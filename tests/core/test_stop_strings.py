"""Stop strings: a completion ends at the token whose text completes one, as vLLM's `stop` with
`include_stop_str_in_output` does; the environment's action text ends with the stop string."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.config import ConfigError, from_dict
from creditline.engines import SamplingParams, TorchEngine
from creditline.engines.stop_strings import cut_after_stop, stop_end
from creditline.envs import make_env
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy, environment_corpus
from creditline.policy.models import load_policy
from creditline.rollout.episodes import decode_action, run_episodes

SMALL = ChatPolicyConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                         max_positions=256, vocab_size=320)  # fmt: skip
LIMIT = 12


def maze():
    return make_env("maze", size=4, max_steps=3)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    folder = build_chat_policy(
        tmp_path_factory.mktemp("stop") / "policy", environment_corpus(maze, 20), SMALL
    )
    model, tokenizer = load_policy(folder)
    return TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer), tokenizer


@pytest.fixture(scope="module")
def free_run(policy):
    """Completions of a random policy with no stop string: long, varied texts to cut stop strings from."""
    engine, tokenizer = policy
    prompts = [tokenizer.encode(f"go key left {i} down 1", add_special_tokens=False) for i in range(8)]
    return prompts, engine.generate(prompts, SamplingParams(temperature=1.5, max_new_tokens=LIMIT, seed=5))


def test_stop_end_is_the_end_of_the_stop_string_that_ends_first():
    assert stop_end("say up</a> then down</b>", ["</b>", "</a>"]) == len("say up</a>")
    assert stop_end("ab", ["b", "ab"]) == 1 + 1  # "ab" ends at 2, "b" too: the earliest end wins
    assert stop_end("abc", ["x"]) is None
    assert cut_after_stop("up</a>junk", ["</a>"]) == "up</a>" and cut_after_stop("up", ["</a>"]) == "up"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_stop_string_cuts_the_free_run_at_the_token_that_completes_it(policy, free_run, data):
    """Sampling is the same up to the stop (finished rows are still sampled, so no row's random stream
    moves): each completion is the free run's up to the first token whose text contains a stop string."""
    engine, tokenizer = policy
    prompts, free = free_run
    texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in free]
    source = data.draw(st.sampled_from([t for t in texts if len(t) >= 2]))
    start = data.draw(st.integers(0, len(source) - 2))
    stop = source[start : start + data.draw(st.integers(1, min(4, len(source) - start)))]
    stopped = engine.generate(
        prompts, SamplingParams(temperature=1.5, max_new_tokens=LIMIT, seed=5, stop=(stop,))
    )
    for whole, cut in zip(free, stopped, strict=True):
        prefixes = [
            tokenizer.decode(whole.token_ids[:n], skip_special_tokens=True)
            for n in range(1, len(whole.token_ids) + 1)
        ]
        first = next((n for n, text in enumerate(prefixes, 1) if stop in text), None)
        eos = (
            whole.token_ids.index(engine.eos_token_id) + 1 if engine.eos_token_id in whole.token_ids else None
        )
        end = min(n for n in (first, eos, len(whole.token_ids)) if n is not None)
        assert cut.token_ids == whole.token_ids[:end]
        assert cut.logprobs == pytest.approx(
            whole.logprobs[:end], abs=1e-5
        )  # other rows' masks move float bits
        assert cut.finish_reason == ("stop" if first == end or eos == end else "length")
        if first == end:
            assert decode_action(tokenizer, cut.token_ids, (stop,)).endswith(stop.strip())


def test_the_action_text_is_cut_after_a_stop_string_that_ends_inside_a_token(policy):
    engine, tokenizer = policy
    word = next(
        t for t in tokenizer.convert_ids_to_tokens(range(len(tokenizer))) if len(t) >= 4 and t.isalpha()
    )
    token = tokenizer.convert_tokens_to_ids(word)
    text = tokenizer.decode([token])
    action = decode_action(tokenizer, [token, token], (text[:2],))
    assert action == text[:2]


def test_stop_strings_need_the_engines_tokenizer(policy):
    engine, tokenizer = policy
    bare = TorchEngine(engine.model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="stop strings need the engine's tokenizer"):
        bare.generate([[5, 6]], SamplingParams(stop=("x",)))


def test_a_round_with_a_stop_string_records_stopped_turns_and_keeps_the_conversation(policy, free_run):
    engine, tokenizer = policy
    _, free = free_run
    stop = tokenizer.decode(free[0].token_ids[1:2], skip_special_tokens=True)  # a text the policy writes
    sampling = SamplingParams(temperature=1.5, max_new_tokens=LIMIT, seed=5, stop=(stop,))
    steps = run_episodes(engine, tokenizer, maze, "stop", 1, list(range(6)), 2, sampling, "chat").steps
    hit = steps[
        [stop in tokenizer.decode(list(ids), skip_special_tokens=True) for ids in steps["completion_ids"]]
    ]
    assert len(hit) > 0
    assert (hit["finish_reason"] == "stop").all()
    assert all(action.endswith(stop.strip()) for action in hit["action"])
    for _, episode in steps.groupby("episode_id"):
        rows = episode.sort_values("step_idx").to_dict("records")
        for before, after in zip(rows, rows[1:], strict=False):
            sampled = list(before["prompt_ids"]) + list(before["completion_ids"])
            assert list(after["prompt_ids"][: len(sampled)]) == sampled


def test_stop_in_a_config_is_a_list_of_non_empty_strings():
    assert from_dict({"rollouts": {"stop": ["</answer>"]}}).rollouts.stop == ("</answer>",)
    assert from_dict({"rollouts": {"stop": ["</answer>"]}}).rollouts.sampling(3).stop == ("</answer>",)
    for bad in (["</answer>", ""], "</answer>", [1], ["x"] * 17):
        with pytest.raises(ConfigError) as caught:
            from_dict({"rollouts": {"stop": bad}})
        (line,) = caught.value.problems
        assert line.startswith("rollouts.stop = ") and line.endswith(
            "must be a list of 0..16 non-empty strings"
        )
