"""Serving a policy checkpoint the way vLLM's OpenAI-compatible server does: request dict in, response dict
out.

Outside rollout code (PrimeIntellect's verifiers, any OpenAI client) talks to a model over HTTP. To train a
creditline policy on such rollouts, the server must return what vLLM returns for RL: the prompt's token
ids, the sampled completion's token ids and each sampled token's log-prob under the distribution it was
sampled from. This module builds those responses from the project's own engine protocol
(`Engine.generate(prompts, SamplingParams) -> [Completion]`), so the same code serves a checkpoint with
`TorchEngine` on a CPU and `VLLMEngine` on a GPU; `creditline.serve.serving_http` puts it behind HTTP.

Shapes follow vLLM's protocol (vllm/entrypoints/openai/chat_completion/protocol.py, completion/protocol.py,
serve/disagg/protocol.py), field for field where the engine can honour them:

- chat (`chat_completion`): messages are rendered with the tokenizer's own chat template (tool calls and
  `tools` included; `arguments` strings become dicts, as vLLM passes them), the rendering is encoded once
  (`add_special_tokens=False`), and the completion ids are returned as sampled, never re-tokenised.
  `logprobs.content` holds one `{token, logprob, bytes, top_logprobs: []}` per sampled token;
  `return_token_ids` adds `prompt_token_ids` and per-choice `token_ids`; `return_tokens_as_token_ids`
  writes tokens as `"token_id:N"`. With `tools`, hermes `<tool_call>` blocks become `tool_calls`
  (`creditline.rollout.tool_calls`) and `finish_reason` "tool_calls".
- text completions (`completion`), tokens in / tokens out (`generate_tokens`, vLLM's
  `/inference/v1/generate`, which verifiers 0.4.0's training client calls), `tokenize`, `models`.

Engines report only the sampled token's log-prob, so alternatives (`top_logprobs` > 0, completions
`logprobs` > 0, generate `logprobs` > 1) are refused rather than faked. Log-probs below -9999 are clamped to
-9999, as vLLM does. Sampling knobs the engines lack (top_k, penalties, ...) are accepted at their neutral
value and refused otherwise; unknown fields are ignored, as vLLM ignores them. Stop token ids are applied
to the completion after sampling: a row's tokens never depend on what follows them, so cutting at the first
stop token gives what stopping there would have.

Seeds: a request's `seed` fixes its completions; without one the caller (the HTTP layer) passes a fallback
seed derived from the server's `--seed` and a request counter. Choice `i` of `n` samples with
`choice_seed(seed, i)` (its own engine call: engines seed per call, and vLLM per request).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from creditline.engines.base import Completion, Engine
from creditline.engines.stop_strings import stop_end
from creditline.ids import canonical_hash, derive_seed
from creditline.rollout.tool_calls import parse_tool_calls
from creditline.serve.serving_requests import (
    RequestError,
    SamplingRequest,
    chat_messages,
    chat_tools,
    check_model,
    flag,
    prompt_token_ids,
    sampling_request,
)

LOGPROB_FLOOR = -9999.0
"""vLLM writes log-probs below this (-inf included) as this value."""

__all__ = ["RequestError", "PolicyServer", "chat_completion", "completion", "generate_tokens", "tokenize"]


@dataclass(frozen=True)
class PolicyServer:
    """What answers requests: one engine over one checkpoint, its tokenizer and the name it is served as."""

    engine: Engine
    tokenizer: Any
    model_name: str
    folder: str = ""
    """The checkpoint folder (reported as the model card's `root`)."""

    @property
    def context_length(self) -> int | None:
        return self.engine.context_length


@dataclass(frozen=True)
class SampledChoice:
    """One completion as a response reports it."""

    token_ids: list[int]
    logprobs: list[float]
    """One per token of `token_ids`."""
    finish_reason: str
    """"stop" (EOS, stop string or stop token) or "length"."""
    stop_reason: int | str | None
    """The stop string or stop token id that ended it (None for the EOS or a length cut), as vLLM reports."""
    text: str


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of a request seeded `seed`: choice 0 keeps the request's seed."""
    return seed if index == 0 else derive_seed(seed, "choice", index)


def fallback_seed(server_seed: int, request_number: int) -> int:
    """The seed of the `request_number`-th request that names none, on a server started with `server_seed`."""
    return derive_seed(server_seed, "request", request_number)


def render_chat(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    template_kwargs: dict | None = None,
) -> list[int]:
    """Prompt ids of `messages` (already normalised by `chat_messages`): the tokenizer's chat template
    renders the text, which is encoded once without adding special tokens (the template wrote them)."""
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError(
            "the served policy's tokenizer has no chat template: use /v1/completions", "messages"
        )
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            tokenize=False,
            **(template_kwargs or {}),
        )
    except Exception as exc:  # jinja errors, or a template's own raise_exception
        raise RequestError(f"the chat template cannot render these messages: {exc}", "messages") from None
    return list(tokenizer.encode(text, add_special_tokens=False))


def sample_choices(
    server: PolicyServer, prompt_ids: Sequence[int], sampling: SamplingRequest
) -> list[SampledChoice]:
    """Sample `sampling.n` completions of one prompt and decode them as the request asks."""
    choices = []
    for index in range(sampling.n):
        params = replace(sampling.params, seed=choice_seed(sampling.params.seed, index))
        (sampled,) = server.engine.generate([list(prompt_ids)], params)
        choices.append(_decoded(server.tokenizer, server.engine.eos_token_id, sampled, sampling))
    return choices


def _decoded(tokenizer, eos_token_id: int, sampled: Completion, sampling: SamplingRequest) -> SampledChoice:
    stop_reason: int | str | None
    ids, logprobs, finish, stop_reason = (
        list(sampled.token_ids),
        list(sampled.logprobs),
        sampled.finish_reason,
        None,
    )
    for position, token in enumerate(
        ids
    ):  # the EOS only ends a completion; a stop token id may be inside one
        if token == eos_token_id or token in sampling.stop_token_ids:
            stop_reason = None if token == eos_token_id else token
            ids, logprobs, finish = ids[: position + 1], logprobs[: position + 1], "stop"
            break
    ended_on_token = finish == "stop" and bool(ids) and (ids[-1] == eos_token_id or stop_reason is not None)
    shown = ids[:-1] if ended_on_token and not sampling.include_stop_str_in_output else ids
    text = tokenizer.decode(shown, skip_special_tokens=sampling.skip_special_tokens)
    if finish == "stop" and not ended_on_token and sampling.params.stop:  # a stop string ended it
        end = stop_end(text, sampling.params.stop)
        if end is not None:
            stop_reason = next(s for s in sampling.params.stop if text.find(s) + len(s) == end and s in text)
            text = text[:end] if sampling.include_stop_str_in_output else text[: end - len(stop_reason)]
    return SampledChoice(ids, logprobs, finish, stop_reason, text)


def _token_texts(tokenizer, token_ids: Sequence[int]) -> list[str]:
    return tokenizer.batch_decode([[t] for t in token_ids], skip_special_tokens=False)


def chat_logprobs(tokenizer, choice: SampledChoice, as_token_ids: bool) -> dict:
    """vLLM's `ChatCompletionLogProbs`: one entry per sampled token, `top_logprobs` empty."""
    texts = _token_texts(tokenizer, choice.token_ids)
    return {
        "content": [
            {
                "token": f"token_id:{token}" if as_token_ids else text,
                "logprob": max(logprob, LOGPROB_FLOOR),
                "bytes": list(text.encode("utf-8", errors="replace")),
                "top_logprobs": [],
            }
            for token, logprob, text in zip(choice.token_ids, choice.logprobs, texts, strict=True)
        ]
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def chat_completion(
    server: PolicyServer, request: dict, seed: int, prompt_ids: list[int] | None = None
) -> dict:
    """`POST /v1/chat/completions`. `seed` is used when the request names none; `prompt_ids` (the
    `/v1/chat/completions/tokens` variant) replaces rendering the messages."""
    check_model(server.model_name, request)
    tools = chat_tools(request.get("tools"))
    tool_choice = request.get("tool_choice")
    if tool_choice not in (None, "auto", "none"):
        raise RequestError("tool_choice: only 'auto' and 'none' are supported", "tool_choice")
    parse_tools = bool(tools) and tool_choice != "none"
    if prompt_ids is None:
        prompt_ids = _rendered_prompt(server, request, tools)
    if request.get("top_logprobs"):
        raise RequestError(
            "top_logprobs: this server returns the sampled token's log-prob only; use 0", "top_logprobs"
        )
    # vLLM's hermes parser keeps special tokens when tools are given: `<tool_call>` may be one
    sampling = sampling_request(
        request,
        server.context_length,
        len(prompt_ids),
        seed,
        ("max_completion_tokens", "max_tokens"),
        skip_special_default=not parse_tools,
    )
    want_logprobs = flag(request, "logprobs", False)
    as_ids, want_ids = (
        flag(request, "return_tokens_as_token_ids", False),
        flag(request, "return_token_ids", False),
    )
    sampled = sample_choices(server, prompt_ids, sampling)
    choices = []
    for index, choice in enumerate(sampled):
        parsed = parse_tool_calls(choice.text) if parse_tools else None
        called = parsed is not None and bool(parsed.tool_calls)
        message = {
            "role": "assistant",
            "content": parsed.content if called and parsed is not None else choice.text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": parsed.tool_calls if called and parsed is not None else [],
            "reasoning_content": None,
        }
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": chat_logprobs(server.tokenizer, choice, as_ids) if want_logprobs else None,
                "finish_reason": "tool_calls" if called else choice.finish_reason,
                "stop_reason": choice.stop_reason,
                "token_ids": choice.token_ids if want_ids else None,
            }
        )
    return {
        "id": f"chatcmpl-{response_id(request, seed)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": server.model_name,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": _usage(len(prompt_ids), sum(len(c.token_ids) for c in sampled)),
        "prompt_logprobs": None,
        "prompt_token_ids": list(prompt_ids) if want_ids else None,
        "kv_transfer_params": None,
    }


def _rendered_prompt(server: PolicyServer, request: dict, tools: list[dict] | None) -> list[int]:
    add_generation_prompt = flag(request, "add_generation_prompt", True)
    continue_final_message = flag(request, "continue_final_message", False)
    if add_generation_prompt and continue_final_message:
        raise RequestError(
            "continue_final_message and add_generation_prompt cannot both be true", "continue_final_message"
        )
    template_kwargs = request.get("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise RequestError("chat_template_kwargs must be an object", "chat_template_kwargs")
    messages = chat_messages(request.get("messages"))
    return render_chat(
        server.tokenizer, messages, tools, add_generation_prompt, continue_final_message, template_kwargs
    )


def completion_logprobs(tokenizer, choice: SampledChoice, as_token_ids: bool) -> dict:
    """vLLM's `CompletionLogProbs` with `logprobs=0`: each token's top dict holds the sampled token only."""
    texts = _token_texts(tokenizer, choice.token_ids)
    tokens = [
        f"token_id:{t}" if as_token_ids else text for t, text in zip(choice.token_ids, texts, strict=True)
    ]
    logprobs = [max(lp, LOGPROB_FLOOR) for lp in choice.logprobs]
    offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    return {
        "text_offset": offsets,
        "token_logprobs": logprobs,
        "tokens": tokens,
        "top_logprobs": [{token: lp} for token, lp in zip(tokens, logprobs, strict=True)],
    }


def completion(server: PolicyServer, request: dict, seed: int) -> dict:
    """`POST /v1/completions`: a text prompt, a token-id prompt, or a list of either (choice index
    `prompt * n + i`, as vLLM numbers them)."""
    check_model(server.model_name, request)
    if request.get("echo"):
        raise RequestError("echo is not supported", "echo")
    if request.get("logprobs") not in (None, 0) or isinstance(request.get("logprobs"), bool):
        raise RequestError(
            "logprobs: this server returns the sampled token's log-prob only; use 0", "logprobs"
        )
    prompts = prompt_token_ids(server.tokenizer, request.get("prompt"))
    as_ids, want_ids = (
        flag(request, "return_tokens_as_token_ids", False),
        flag(request, "return_token_ids", False),
    )
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for prompt_index, prompt_ids in enumerate(prompts):
        sampling = sampling_request(request, server.context_length, len(prompt_ids), seed, ("max_tokens",))
        for index, choice in enumerate(sample_choices(server, prompt_ids, sampling)):
            choices.append(
                {
                    "index": prompt_index * sampling.n + index,
                    "text": choice.text,
                    "logprobs": completion_logprobs(server.tokenizer, choice, as_ids)
                    if request.get("logprobs") is not None
                    else None,
                    "finish_reason": choice.finish_reason,
                    "stop_reason": choice.stop_reason,
                    "token_ids": choice.token_ids if want_ids else None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": list(prompt_ids) if want_ids else None,
                }
            )
            completion_tokens += len(choice.token_ids)
        prompt_tokens += len(prompt_ids)
    return {
        "id": f"cmpl-{response_id(request, seed)}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.model_name,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": _usage(prompt_tokens, completion_tokens),
        "kv_transfer_params": None,
    }


def response_id(request: dict, seed: int) -> str:
    """A response's id, from the request and the seed it was answered with: the same request sequence
    gives the same ids (ids derive from their inputs, never drawn at random)."""
    return canonical_hash([request, seed], 32, ensure_ascii=True, default=str)


def generate_tokens(server: PolicyServer, request: dict, seed: int) -> dict:
    """`POST /inference/v1/generate`, vLLM's tokens-in/tokens-out route: `{token_ids, sampling_params}` in,
    `choices[i].token_ids` and (with `sampling_params.logprobs` 0 or 1) `choices[i].logprobs.content` out,
    tokens written as `"token_id:N"` and `top_logprobs` holding the sampled token, as vLLM writes them."""
    check_model(server.model_name, request)
    for name in ("stream", "features"):
        if request.get(name):
            raise RequestError(f"{name} is not supported", name)
    prompt_ids = prompt_token_ids(server.tokenizer, request.get("token_ids"), field="token_ids", batch=False)[
        0
    ]
    params = request.get("sampling_params")
    if not isinstance(params, dict):
        raise RequestError("sampling_params must be an object", "sampling_params")
    top = params.get("logprobs")
    if top is not None and (isinstance(top, bool) or top not in (0, 1)):
        raise RequestError(
            "sampling_params.logprobs: this server returns the sampled token's log-prob only; use 0 or 1",
            "sampling_params.logprobs",
        )
    sampling = sampling_request(
        params, server.context_length, len(prompt_ids), seed, ("max_tokens",), prefix="sampling_params."
    )
    sampled = sample_choices(server, prompt_ids, sampling)
    choices = []
    for index, choice in enumerate(sampled):
        content = [
            {
                "token": f"token_id:{t}",
                "logprob": max(lp, LOGPROB_FLOOR),
                "bytes": None,
                "top_logprobs": [
                    {"token": f"token_id:{t}", "logprob": max(lp, LOGPROB_FLOOR), "bytes": None}
                ],
            }
            for t, lp in zip(choice.token_ids, choice.logprobs, strict=True)
        ]
        choices.append(
            {
                "index": index,
                "logprobs": None if top is None else {"content": content},
                "finish_reason": choice.finish_reason,
                "token_ids": choice.token_ids,
            }
        )
    request_id = request.get("request_id") or response_id(request, seed)
    return {
        "id": f"generate-tokens-{request_id}",
        "request_id": str(request_id),
        "created": int(time.time()),
        "model": server.model_name,
        "choices": choices,
        "prompt_logprobs": None,
        "kv_transfer_params": None,
        "usage": _usage(len(prompt_ids), sum(len(c.token_ids) for c in sampled)),
    }


def tokenize(server: PolicyServer, request: dict) -> dict:
    """`POST /tokenize`: messages (rendered as for chat) or a prompt, as vLLM's route answers."""
    check_model(server.model_name, request)
    if request.get("messages") is not None:
        tokens = _rendered_prompt(server, request, chat_tools(request.get("tools")))
    else:
        prompt = request.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError("give messages or a string prompt", "prompt")
        tokens = list(
            server.tokenizer.encode(prompt, add_special_tokens=flag(request, "add_special_tokens", True))
        )
    return {
        "count": len(tokens),
        "max_model_len": server.context_length,
        "tokens": tokens,
        "token_strs": server.tokenizer.convert_ids_to_tokens(tokens)
        if flag(request, "return_token_strs", False)
        else None,
    }


def models(server: PolicyServer) -> dict:
    """`GET /v1/models`: one model card, with vLLM's `max_model_len` (verifiers reads it to pre-check
    prompt lengths)."""
    card = {
        "id": server.model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "creditline",
        "root": server.folder or server.model_name,
        "parent": None,
        "max_model_len": server.context_length,
        "permission": [],
    }
    return {"object": "list", "data": [card]}
