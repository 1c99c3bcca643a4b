"""The OpenAI/vLLM request -> response functions on a tiny chat policy: rendering with the chat template,
token ids and log-probs exactly as the engine sampled them, stops, seeds, tool calls and refusals."""

import json
from dataclasses import replace

import pytest

from creditline.engines import Completion, SamplingParams, TorchEngine
from creditline.lineage_chain import ParentCheckpointError, served_checkpoint
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy
from creditline.policy.models import load_policy
from creditline.rollout.tool_calls import parse_tool_calls
from creditline.serve.serving import (
    PolicyServer,
    chat_completion,
    choice_seed,
    completion,
    generate_tokens,
    models,
    render_chat,
    tokenize,
)
from creditline.serve.serving_requests import RequestError, chat_messages
from creditline.store import LineageStore, hash_path

SMALL = ChatPolicyConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                         max_positions=256, vocab_size=320)  # fmt: skip
CORPUS = ["What is 2 + 3? The answer is 5.", "hello there, how are you today?",
          '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'] * 4  # fmt: skip
HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return build_chat_policy(tmp_path_factory.mktemp("served") / "policy", CORPUS, SMALL)


@pytest.fixture(scope="module")
def server(policy_dir):
    model, tokenizer = load_policy(policy_dir)
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    return PolicyServer(engine, tokenizer, "tiny", str(policy_dir))


class ScriptedEngine:
    """Returns one fixed completion (token ids with made-up log-probs), whatever the prompt."""

    def __init__(self, token_ids, eos_token_id, finish_reason="stop"):
        self.token_ids, self.eos_token_id, self.finish_reason = list(token_ids), eos_token_id, finish_reason
        self.context_length = 256

    def generate(self, prompts, params):
        logprobs = [-0.5 - i for i in range(len(self.token_ids))]
        return [Completion(self.token_ids, logprobs, self.finish_reason) for _ in prompts]


def scripted(server, text, end_with_eos=True, finish_reason="stop"):
    tokenizer = server.tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False) + (
        [tokenizer.eos_token_id] if end_with_eos else []
    )
    return replace(server, engine=ScriptedEngine(ids, tokenizer.eos_token_id, finish_reason))


def ask(server, seed=0, **fields):
    return chat_completion(server, {"model": "tiny", "messages": HI, **fields}, seed)


def test_the_prompt_is_the_chat_template_rendering_encoded_once(server):
    tokenizer = server.tokenizer
    expected = tokenizer.encode(
        tokenizer.apply_chat_template(HI, add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )
    response = ask(server, max_tokens=2, return_token_ids=True)
    assert response["prompt_token_ids"] == expected
    assert response["usage"]["prompt_tokens"] == len(expected)
    assert tokenize(server, {"model": "tiny", "messages": HI})["tokens"] == expected
    assert tokenizer.decode(expected).endswith("<|im_start|>assistant\n")


def test_token_ids_and_logprobs_are_what_the_engine_sampled(server):
    response = ask(
        server, max_tokens=12, temperature=0.8, top_p=0.9, seed=5, logprobs=True, return_token_ids=True
    )
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=12, seed=5)
    (sampled,) = server.engine.generate([response["prompt_token_ids"]], params)
    choice = response["choices"][0]
    assert choice["token_ids"] == sampled.token_ids
    content = choice["logprobs"]["content"]
    assert len(content) == len(sampled.token_ids)
    assert [entry["logprob"] for entry in content] == sampled.logprobs
    assert all(entry["top_logprobs"] == [] for entry in content)
    texts = [server.tokenizer.decode([t]) for t in sampled.token_ids]
    assert [entry["token"] for entry in content] == texts
    assert [entry["bytes"] for entry in content] == [list(t.encode("utf-8", errors="replace")) for t in texts]
    assert response["usage"]["completion_tokens"] == len(sampled.token_ids)


def test_tokens_as_token_ids_and_the_generate_route(server):
    chat = ask(
        server, max_tokens=6, seed=3, logprobs=True, return_token_ids=True, return_tokens_as_token_ids=True
    )
    ids = chat["choices"][0]["token_ids"]
    assert [e["token"] for e in chat["choices"][0]["logprobs"]["content"]] == [f"token_id:{t}" for t in ids]
    request = {"model": "tiny", "token_ids": chat["prompt_token_ids"],
               "sampling_params": {"max_tokens": 6, "seed": 3, "logprobs": 1}}  # fmt: skip
    generated = generate_tokens(server, request, 0)["choices"][0]
    assert generated["token_ids"] == ids
    entries = generated["logprobs"]["content"]
    assert entries == [
        {"token": f"token_id:{t}", "logprob": e["logprob"], "bytes": None,
         "top_logprobs": [{"token": f"token_id:{t}", "logprob": e["logprob"], "bytes": None}]}
        for t, e in zip(ids, chat["choices"][0]["logprobs"]["content"], strict=True)
    ]  # fmt: skip
    request["sampling_params"].pop("logprobs")
    assert generate_tokens(server, request, 0)["choices"][0]["logprobs"] is None


def test_a_seed_fixes_the_completion_and_choices_differ(server):
    first, again = ask(server, max_tokens=10, seed=11), ask(server, max_tokens=10, seed=11)
    assert first["choices"][0]["message"] == again["choices"][0]["message"]
    assert (
        ask(server, 11, max_tokens=10)["choices"][0]["message"] == first["choices"][0]["message"]
    )  # fallback
    other = ask(server, max_tokens=10, seed=12, return_token_ids=True)
    assert other["choices"][0]["message"] != first["choices"][0]["message"]
    two = ask(server, max_tokens=10, seed=11, n=2, return_token_ids=True)
    assert [c["index"] for c in two["choices"]] == [0, 1]
    assert two["choices"][0]["message"] == first["choices"][0]["message"]
    assert two["choices"][0]["token_ids"] != two["choices"][1]["token_ids"]
    assert choice_seed(11, 0) == 11 and choice_seed(11, 1) != 12


def test_stop_strings_and_stop_token_ids_end_the_completion_where_vllm_would(server):
    tokenizer = server.tokenizer
    free = ask(server, max_tokens=40, temperature=0.7, seed=2, return_token_ids=True)["choices"][0][
        "token_ids"
    ]
    k = next(i for i, t in enumerate(free[2:], 2) if tokenizer.decode([t]).strip().isalnum())
    stop = tokenizer.decode([free[k]])
    end = next(
        j for j in range(len(free)) if stop in tokenizer.decode(free[: j + 1], skip_special_tokens=True)
    )
    for include in (False, True):
        choice = ask(server, max_tokens=40, temperature=0.7, seed=2, return_token_ids=True, stop=[stop],
                     include_stop_str_in_output=include)["choices"][0]  # fmt: skip
        assert choice["token_ids"] == free[: end + 1]
        assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
        text = tokenizer.decode(free[: end + 1], skip_special_tokens=True)
        cut = text.find(stop)
        assert choice["message"]["content"] == (text[: cut + len(stop)] if include else text[:cut])
    at = free.index(free[k])
    choice = ask(server, max_tokens=40, temperature=0.7, seed=2, return_token_ids=True, logprobs=True,
                 stop_token_ids=[free[k]])["choices"][0]  # fmt: skip
    assert choice["token_ids"] == free[: at + 1] and len(choice["logprobs"]["content"]) == at + 1
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", free[k])


def test_the_eos_is_kept_in_the_ids_and_left_out_of_the_text(server):
    choice = ask(scripted(server, "five"), return_token_ids=True)["choices"][0]
    assert choice["token_ids"][-1] == server.tokenizer.eos_token_id
    assert (choice["message"]["content"], choice["finish_reason"], choice["stop_reason"]) == (
        "five",
        "stop",
        None,
    )
    shown = ask(scripted(server, "five"), include_stop_str_in_output=True, skip_special_tokens=False)
    assert shown["choices"][0]["message"]["content"] == "five<|im_end|>"
    cut = ask(scripted(server, "five", end_with_eos=False, finish_reason="length"))["choices"][0]
    assert (cut["message"]["content"], cut["finish_reason"]) == ("five", "length")


def test_hermes_tool_calls_become_openai_tool_calls(server):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    text = 'Sure.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    choice = ask(scripted(server, text), tools=tools)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Sure."
    assert choice["message"]["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    ]
    untouched = ask(scripted(server, text), tools=tools, tool_choice="none")["choices"][0]
    assert untouched["message"]["tool_calls"] == [] and untouched["finish_reason"] == "stop"
    assert ask(scripted(server, text))["choices"][0]["message"]["content"] == text  # no tools: plain text


def test_parse_tool_calls_follows_vllms_hermes_parser():
    two = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}</tool_call> and '
                           '<tool_call>\n{"name": "b", "arguments": {"x": "é"}}\n</tool_call>')  # fmt: skip
    assert two.content is None
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in two.tool_calls] == [
        ("call_0", "a", "{}"), ("call_1", "b", '{"x": "é"}')
    ]  # fmt: skip
    unclosed = parse_tool_calls('x <tool_call>{"name": "a", "arguments": {"n": 1}}')
    assert unclosed.content == "x " and unclosed.tool_calls[0]["function"]["arguments"] == '{"n": 1}'
    for broken in ("<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                   "<tool_call>[1]</tool_call>", "no call"):  # fmt: skip
        assert parse_tool_calls(broken).tool_calls == [] and parse_tool_calls(broken).content == broken


def test_tool_calls_and_tool_messages_reach_the_template(server):
    messages = chat_messages([
        {"role": "user", "content": [{"type": "text", "text": "add"}, {"type": "text", "text": "2 and 3"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "5"},
    ])  # fmt: skip
    assert messages[0]["content"] == "add\n2 and 3"
    assert messages[1]["content"] == "" and messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 2}
    template = (
        "{% for t in tools or [] %}[tool {{ t.function.name }}]{% endfor %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
        "<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    )
    tokenizer = server.tokenizer
    original, tokenizer.chat_template = tokenizer.chat_template, template
    try:
        tools = [{"type": "function", "function": {"name": "add"}}]
        text = tokenizer.decode(render_chat(tokenizer, messages, tools))
    finally:
        tokenizer.chat_template = original
    assert text.startswith("[tool add]<|im_start|>user\nadd\n2 and 3<|im_end|>")
    assert '<tool_call>{"a": 2}</tool_call>' in text and "<|im_start|>tool\n5<|im_end|>" in text


def test_text_and_token_prompts_on_the_completions_route(server):
    ids = server.tokenizer.encode("hello there")
    by_text = completion(server, {"prompt": "hello there", "max_tokens": 5, "seed": 1, "logprobs": 0,
                                  "return_token_ids": True}, 0)  # fmt: skip
    by_ids = completion(server, {"prompt": ids, "max_tokens": 5, "seed": 1, "return_token_ids": True}, 0)
    assert by_text["choices"][0]["prompt_token_ids"] == ids
    assert by_text["choices"][0]["token_ids"] == by_ids["choices"][0]["token_ids"]
    logprobs = by_text["choices"][0]["logprobs"]
    assert (
        len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(by_text["choices"][0]["token_ids"])
    )
    assert logprobs["top_logprobs"][0] == {logprobs["tokens"][0]: logprobs["token_logprobs"][0]}
    batch = completion(server, {"prompt": [ids, "hello"], "max_tokens": 3, "n": 2}, 0)
    assert [c["index"] for c in batch["choices"]] == [0, 1, 2, 3]
    assert models(server)["data"][0] | {"created": 0} == {
        "id": "tiny", "object": "model", "created": 0, "owned_by": "creditline", "root": server.folder,
        "parent": None, "max_model_len": 256, "permission": []}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"messages": []}, "messages", "non-empty list"),
        ({"temperature": "hot"}, "temperature", "must be a number"),
        ({"top_p": 0}, "top_p", "must be in"),
        ({"max_tokens": 300}, "max_tokens", "maximum context length is 256 tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", ">= 1"),
        ({"messages": [{"role": "user", "content": "x " * 300}]}, "messages", "maximum context length"),
        ({"top_logprobs": 2}, "top_logprobs", "sampled token's log-prob only"),
        ({"top_k": 5}, "top_k", "not supported"),
        ({"stop": [""]}, "stop", "non-empty string"),
        ({"n": 0}, "n", "must be in"),
        ({"tool_choice": "required"}, "tool_choice", "only 'auto' and 'none'"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages", "role"),
    ],
)
def test_bad_requests_name_the_field(server, fields, param, words):
    with pytest.raises(RequestError) as caught:
        chat_completion(server, {"model": "tiny", "messages": HI, "max_tokens": 4, **fields}, 0)
    body = caught.value.body()["error"]
    assert (body["param"], body["code"], body["type"]) == (param, 400, "BadRequestError")
    assert words in body["message"]


def test_other_refusals(server):
    with pytest.raises(RequestError) as caught:
        chat_completion(server, {"model": "other", "messages": HI}, 0)
    assert caught.value.status == 404 and caught.value.body()["error"]["param"] == "model"
    for request, param in [
        ({"token_ids": [1, 2], "sampling_params": {"logprobs": 5}}, "sampling_params.logprobs"),
        ({"token_ids": [1, 99999], "sampling_params": {}}, "token_ids"),
        ({"token_ids": [1, 2], "sampling_params": {"max_tokens": 1000}}, "sampling_params.max_tokens"),
        ({"token_ids": [1, 2], "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
    ]:
        with pytest.raises(RequestError) as caught:
            generate_tokens(server, request, 0)
        assert caught.value.param == param
    with pytest.raises(RequestError, match="logprob"):
        completion(server, {"prompt": "hi", "logprobs": 3}, 0)
    json.dumps(ask(server, max_tokens=3, logprobs=True))  # responses are plain JSON


def test_served_checkpoint_resolves_rounds_from_the_lineage_store(tmp_path, policy_dir):
    store = LineageStore(tmp_path / "lineage.duckdb")
    with pytest.raises(ParentCheckpointError, match="no initial policy"):
        served_checkpoint(store, "exp", 0)
    store.record_initial_policy("exp", str(policy_dir), hash_path(policy_dir))
    assert served_checkpoint(store, "exp").path == str(policy_dir)
    with pytest.raises(ParentCheckpointError, match="no checkpoint for round 2"):
        served_checkpoint(store, "exp", 2)


def test_response_ids_derive_from_the_request_and_its_seed():
    from creditline.serve.serving import response_id

    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert response_id(request, 3) == response_id(dict(request), 3)
    assert response_id(request, 3) != response_id(request, 4)
    assert response_id(request, 3) != response_id({**request, "seed": 1}, 3)
