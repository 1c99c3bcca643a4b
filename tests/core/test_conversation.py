"""Token-preserving multi-turn: the sampled ids stay in the conversation exactly, whatever they decode to."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditline.policy.chat_policy import train_chat_tokenizer
from creditline.policy.models import build_tokenizer
from creditline.rollout.conversation import ChatTemplateError, Conversation

LINES = [f"go key {d} {i % 5} last {d}" for i, d in enumerate(["left", "right", "up", "down"] * 30)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_chat_tokenizer([*LINES, "up", "down", "left", "right"], vocab_size=320)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_a_stopped_turn_adds_the_template_newline_then_the_reply(tokenizer):
    conversation = Conversation(tokenizer, "go key left 2 last none", system="Play.")
    first = conversation.prompt_ids
    assert tokenizer.decode(first) == (
        "<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\ngo key left 2 last none<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    completion = [*ids(tokenizer, "left"), tokenizer.eos_token_id]
    reply = "<|im_start|>user\ngo key left 1 last left<|im_end|>\n<|im_start|>assistant\n"
    new = conversation.add_turn(completion, stopped=True, next_message="go key left 1 last left")
    assert new == first + completion + ids(tokenizer, "\n") + ids(tokenizer, reply)


def test_a_cut_turn_is_closed_with_the_eos_the_model_did_not_sample(tokenizer):
    conversation = Conversation(tokenizer, "go key left 2 last none")
    first = conversation.prompt_ids
    completion = ids(tokenizer, "left left")  # cut at max_new_tokens: no <|im_end|>
    new = conversation.add_turn(completion, stopped=False, next_message="go key left 1 last invalid")
    bridge = [tokenizer.eos_token_id, *ids(tokenizer, "\n")]
    assert new[: len(first) + len(completion) + len(bridge)] == first + completion + bridge
    assert conversation.messages[-2] == {"role": "assistant", "content": "left left"}


def test_sampled_ids_are_kept_where_re_encoding_the_text_would_change_them(tokenizer):
    """`up` sampled as two byte tokens: rendering the history again and encoding it gives the merged
    token instead; the conversation keeps the two that were sampled (the tokens trained on)."""
    merged = ids(tokenizer, "up")
    assert len(merged) == 1
    as_bytes = [tokenizer.convert_tokens_to_ids(ch) for ch in "up"]
    conversation = Conversation(tokenizer, "go key up 1 last none")
    before = conversation.prompt_ids
    new = conversation.add_turn([*as_bytes, tokenizer.eos_token_id], True, "go key up 0 last up")
    assert new[len(before) : len(before) + 3] == [*as_bytes, tokenizer.eos_token_id]
    rendered = tokenizer.apply_chat_template(
        conversation.messages, tokenize=False, add_generation_prompt=True
    )
    assert ids(tokenizer, rendered) != new  # what a re-tokenising loop would have trained on
    assert tokenizer.decode(ids(tokenizer, rendered)) == tokenizer.decode(new)  # same text, other tokens


def test_special_tokens_sampled_inside_a_completion_stay_as_sampled(tokenizer):
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    conversation = Conversation(tokenizer, "go key up 1 last none")
    before = conversation.prompt_ids
    completion = [*ids(tokenizer, "up"), start, *ids(tokenizer, "x"), tokenizer.eos_token_id]
    new = conversation.add_turn(completion, True, "go key up 0 last up")
    assert new[len(before) : len(before) + len(completion)] == completion


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(
        st.tuples(
            st.lists(st.integers(3, 319), min_size=1, max_size=6), st.booleans(), st.sampled_from(LINES)
        ),
        min_size=1,
        max_size=5,
    )
)
def test_each_prompt_starts_with_the_previous_prompt_and_its_completion(tokenizer, turns):
    conversation = Conversation(tokenizer, LINES[0], system="Play.")
    for completion, stopped, message in turns:
        completion = [*completion, tokenizer.eos_token_id] if stopped else completion
        before = list(conversation.prompt_ids)
        new = conversation.add_turn(completion, stopped, message)
        assert new[: len(before) + len(completion)] == before + completion
        assert tokenizer.decode(new).endswith(
            f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"
        )


def test_a_tokenizer_without_a_chat_template_is_refused():
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        Conversation(build_tokenizer(["go", "key"]), "go key")


def test_a_template_that_rewrites_past_assistant_turns_is_refused(tokenizer):
    """Like templates that drop the reasoning of earlier turns: the history is not a prefix any more."""
    rewriting = tokenizer.chat_template.replace(
        "message['content']",
        "(message['content'] if message['role'] != 'assistant' or loop.last else '…')",
    )
    tokenizer = train_chat_tokenizer(LINES, vocab_size=300)
    tokenizer.chat_template = rewriting
    conversation = Conversation(tokenizer, LINES[0])
    with pytest.raises(ChatTemplateError, match="concatenation of its messages"):
        conversation.add_turn([*ids(tokenizer, "up"), tokenizer.eos_token_id], True, LINES[1])
