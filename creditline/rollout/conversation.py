"""A multi-turn chat episode as token ids that only ever grow: the sampled tokens are never re-encoded.

A chat policy sees the whole conversation each turn, rendered by its tokenizer's chat template. Rendering
the message list again each turn and encoding the text is what most pipelines do, and it is wrong for RL:
the sampled completion ids need not be what encoding their decoded text gives back (BPE merges across the
boundary, a byte-level token split inside a character, a special token sampled mid-text), so the tokens
trained on differ from the tokens sampled ("multi-turn tokenization drift").

`Conversation` keeps the ids instead. Turn t's prompt is

    prompt_{t+1} = prompt_t + completion_t + encode(bridge_t) + encode(reply_{t+1})

- `completion_t` are the sampled ids exactly as the engine returned them;
- `bridge_t` is what the template writes after the assistant's text that the model did not sample: for
  ChatML the `\\n` after `<|im_end|>`, plus `<|im_end|>` itself when the completion was cut at
  `max_new_tokens`;
- `reply_{t+1}` is the environment's next message and the next assistant header
  (`<|im_start|>user\\n…<|im_end|>\\n<|im_start|>assistant\\n`).

Only `bridge` and `reply` are encoded, each on its own; both are found as string differences of the
template's own renderings, so any template that renders a conversation as the concatenation of its
messages works (ChatML, Llama 3, Mistral, Gemma). A template that rewrites earlier assistant turns
(e.g. one that drops reasoning from past turns) breaks that; it is refused with a clear error rather than
trained on silently.
"""

from __future__ import annotations

from collections.abc import Sequence


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot keep a conversation's token ids."""


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def require_chat_template(tokenizer) -> None:
    """Refuse a tokenizer without a chat template, saying how to fix it."""
    if not has_chat_template(tokenizer):
        raise ChatTemplateError(
            f"the tokenizer ({getattr(tokenizer, 'name_or_path', '?')}) has no chat template: "
            'add one to its tokenizer_config.json, or set [rollouts] prompt_format = "plain"'
        )


class Conversation:
    """One episode's messages and prompt ids. `prompt_ids` is what the policy is asked to continue."""

    def __init__(self, tokenizer, first_message: str, system: str | None = None):
        require_chat_template(tokenizer)
        self.tokenizer = tokenizer
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.messages.append({"role": "user", "content": first_message})
        self._asked = self._render(self.messages, generation_prompt=True)
        """The rendering `prompt_ids` stands for (kept: each turn renders from it once, not twice)."""
        self.prompt_ids: list[int] = self._encode(self._asked)

    def add_turn(self, completion_ids: Sequence[int], stopped: bool, next_message: str) -> list[int]:
        """Append the sampled completion (`stopped`: it ended at the EOS, else it was cut) and the
        environment's next message; return the new `prompt_ids`."""
        eos = self.tokenizer.eos_token_id
        content_ids = list(
            completion_ids[:-1] if stopped and completion_ids[-1:] == [eos] else completion_ids
        )
        content = self.tokenizer.decode(content_ids, skip_special_tokens=False)
        answered = self._render([*self.messages, {"role": "assistant", "content": content}], False)
        assistant_text = _suffix(answered, self._asked, "the assistant's turn")
        sampled_text = self.tokenizer.decode(list(completion_ids), skip_special_tokens=False)
        if not assistant_text.startswith(sampled_text):
            raise ChatTemplateError(
                f"the chat template does not render the assistant's text as sampled ({sampled_text!r} is not "
                f"the start of {assistant_text!r}): token-preserving multi-turn needs a template that "
                "writes assistant turns verbatim"
            )
        bridge = assistant_text[len(sampled_text) :]
        self.messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": next_message},
        ]
        self._asked = self._render(self.messages, generation_prompt=True)
        reply = _suffix(self._asked, answered, "the environment's reply")
        self.prompt_ids = [*self.prompt_ids, *completion_ids, *self._encode(bridge), *self._encode(reply)]
        return self.prompt_ids

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []


def _suffix(longer: str, prefix: str, what: str) -> str:
    if not longer.startswith(prefix):
        raise ChatTemplateError(
            f"the chat template renders the conversation differently once {what} is added (the earlier "
            "rendering is not a prefix of the later one): token-preserving multi-turn needs a template "
            "that renders a conversation as the concatenation of its messages"
        )
    return longer[len(prefix) :]
