"""Reading OpenAI/vLLM request bodies: validated fields, or one `RequestError` naming the bad one.

A request is a JSON object from a client we do not control, so every field is checked before the engine
sees it, and a bad one is answered with HTTP 400 and an OpenAI-style error body
(`{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`, vLLM's `ErrorResponse`) whose
`param` names the field. A prompt and `max_tokens` that together exceed the model's context are refused
with vLLM's wording ("This model's maximum context length is N tokens. ..."), which clients such as
verifiers recognise as an overlong prompt.

Defaults are vLLM's: temperature 1, top_p 1, n 1, `max_tokens` the rest of the context,
`skip_special_tokens` true, `include_stop_str_in_output` false.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from creditline.engines.base import SamplingParams

NEUTRAL_KNOBS: dict[str, tuple[Any, ...]] = {
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    "repetition_penalty": (None, 1),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "min_tokens": (None, 0),
    "ignore_eos": (None, False),
    "logit_bias": (None, {}),
    "prompt_logprobs": (None,),
    "best_of": (None, 1),
    "use_beam_search": (None, False),
    "stream": (None, False),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
    "response_format": (None, {"type": "text"}),
}
"""Sampling options the engines do not implement, with the values that mean "off" (accepted)."""

MAX_CHOICES = 64
"""The largest `n` a request may ask for."""


class RequestError(ValueError):
    """A request the server refuses; `param` names the field, `status` is the HTTP status."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status

    def body(self) -> dict:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class SamplingRequest:
    """How to sample and decode a request's completions."""

    params: SamplingParams
    """Engine parameters; `seed` is the request's (or the server's fallback)."""
    n: int
    """Completions per prompt."""
    stop_token_ids: tuple[int, ...]
    """Tokens that end a completion besides the EOS (kept as its last token)."""
    skip_special_tokens: bool
    """Drop special tokens from the returned text (never from the token ids)."""
    include_stop_str_in_output: bool
    """Keep the stop string (or the EOS / stop token's text) at the end of the returned text."""


def flag(request: dict, name: str, default: bool, prefix: str = "") -> bool:
    value = request.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{prefix}{name} must be true or false, got {value!r}", prefix + name)
    return value


def _number(request: dict, name: str, default, integer: bool, minimum=None, maximum=None, prefix: str = ""):
    value = request.get(name)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise RequestError(
            f"{prefix}{name} must be {'an integer' if integer else 'a number'}, got {value!r}", prefix + name
        )
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise RequestError(f"{prefix}{name} must be {bounds}, got {value!r}", prefix + name)
    return value


def _stop_strings(value, prefix: str) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError(f"{prefix}stop must be a non-empty string or a list of them", prefix + "stop")
    return tuple(stops)


def sampling_request(
    request: dict,
    context_length: int | None,
    prompt_length: int,
    seed: int,
    max_token_names: Sequence[str],
    skip_special_default: bool = True,
    prefix: str = "",
) -> SamplingRequest:
    """The sampling fields of `request` (`prefix` names where they sit, e.g. "sampling_params."), checked
    against the context. `seed` is used when the request has none; the first of `max_token_names` that is
    set gives the completion budget."""
    for name, neutral in NEUTRAL_KNOBS.items():
        if request.get(name) not in neutral:
            raise RequestError(
                f"{prefix}{name}={request[name]!r} is not supported by this server", prefix + name
            )
    max_tokens, budget_name = None, max_token_names[0]
    for name in max_token_names:
        max_tokens = _number(request, name, None, True, minimum=1, prefix=prefix)
        if max_tokens is not None:
            budget_name = name
            break
    if max_tokens is None:
        max_tokens = 16 if context_length is None else max(context_length - prompt_length, 1)
    check_context(context_length, prompt_length, max_tokens, prefix + budget_name)
    stop_token_ids = request.get("stop_token_ids") or []
    if not isinstance(stop_token_ids, list) or not all(_is_int(t) for t in stop_token_ids):
        raise RequestError(f"{prefix}stop_token_ids must be a list of token ids", prefix + "stop_token_ids")
    params = SamplingParams(
        temperature=float(_number(request, "temperature", 1.0, False, minimum=0, prefix=prefix)),
        top_p=float(_number(request, "top_p", 1.0, False, minimum=1e-9, maximum=1, prefix=prefix)),
        max_new_tokens=max_tokens,
        seed=_number(request, "seed", seed, True, prefix=prefix),
        stop=_stop_strings(request.get("stop"), prefix),
    )
    return SamplingRequest(
        params=params,
        n=_number(request, "n", 1, True, minimum=1, maximum=MAX_CHOICES, prefix=prefix),
        stop_token_ids=tuple(stop_token_ids),
        skip_special_tokens=flag(request, "skip_special_tokens", skip_special_default, prefix),
        include_stop_str_in_output=flag(request, "include_stop_str_in_output", False, prefix),
    )


def check_context(context_length: int | None, prompt_length: int, max_tokens: int, param: str) -> None:
    """Refuse a prompt that, with its completion budget, does not fit the model's context."""
    if context_length is None:
        return
    if prompt_length >= context_length:
        raise RequestError(
            f"This model's maximum context length is {context_length} tokens. However, your "
            f"request has {prompt_length} input tokens. Please reduce the length of the input "
            "messages.",
            "messages",
        )
    if prompt_length + max_tokens > context_length:
        raise RequestError(
            f"This model's maximum context length is {context_length} tokens. However, you "
            f"requested {prompt_length + max_tokens} tokens ({prompt_length} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            param,
        )


def check_model(served_name: str, request: dict) -> None:
    """A request may omit `model`; naming another model is a 404, as vLLM answers."""
    if not isinstance(request, dict):
        raise RequestError("the request body must be a JSON object")
    model = request.get("model")
    if model is not None and model != served_name:
        raise RequestError(f"The model `{model}` does not exist.", "model", status=404)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(content, where: str) -> str:
    """A message's content as the template sees it: None is "", text parts are joined with newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        if all(isinstance(p.get("text"), str) for p in content):
            return "\n".join(p["text"] for p in content)
    raise RequestError(f"{where}.content must be a string or a list of text parts", "messages")


def _template_tool_call(call, where: str) -> dict:
    """An assistant's tool call as chat templates expect it: `arguments` a dict, not a JSON string."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(
            f"{where} must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}", "messages"
        )
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise RequestError(f"{where}.function.arguments is not valid JSON", "messages") from None
    return {**call, "type": call.get("type", "function"), "function": {**function, "arguments": arguments}}


def chat_messages(messages) -> list[dict]:
    """Validate chat messages and put them in the form chat templates read (vLLM's normalisation)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {role, content} objects", "messages")
    normalised = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            raise RequestError(
                f"{where} must be an object whose role is system, developer, user, assistant or tool",
                "messages",
            )
        entry = {k: v for k, v in message.items() if v is not None}
        entry["content"] = _text(message.get("content"), where)
        if message["role"] == "assistant" and message.get("tool_calls"):
            if not isinstance(message["tool_calls"], list):
                raise RequestError(f"{where}.tool_calls must be a list", "messages")
            entry["tool_calls"] = [
                _template_tool_call(call, f"{where}.tool_calls[{k}]")
                for k, call in enumerate(message["tool_calls"])
            ]
        normalised.append(entry)
    return normalised


def chat_tools(tools) -> list[dict] | None:
    """OpenAI `tools` (`[{"type": "function", "function": {"name", ...}}]`), passed to the template as
    given."""
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise RequestError("tools must be a list of {'type': 'function', 'function': {'name', ...}}", "tools")
    return tools


def prompt_token_ids(tokenizer, prompt, field: str = "prompt", batch: bool = True) -> list[list[int]]:
    """Prompts of a completion request: a string, a list of token ids, or (when `batch`) a list of either.
    Strings are encoded with the tokenizer's special tokens (vLLM's completions default)."""
    single = isinstance(prompt, str) or (
        isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt)
    )
    prompts = [prompt] if single else prompt if batch and isinstance(prompt, list) and prompt else None
    if prompts is None:
        kinds = "a string, a list of token ids, or a list of those" if batch else "a list of token ids"
        raise RequestError(f"{field} must be {kinds}", field)
    vocabulary = len(tokenizer)
    encoded = []
    for item in prompts:
        ids = list(tokenizer.encode(item, add_special_tokens=True)) if isinstance(item, str) else item
        if not isinstance(ids, list) or not ids or not all(_is_int(t) and 0 <= t < vocabulary for t in ids):
            raise RequestError(
                f"{field}: a prompt must be non-empty text or token ids in [0, {vocabulary})", field
            )
        if not batch and isinstance(item, str):
            raise RequestError(f"{field} must be a list of token ids", field)
        encoded.append(ids)
    return encoded
