"""The offline chat policy: a real Qwen2 + byte-level BPE folder, loaded back the way users load models."""

import unicodedata

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditline.policy.chat_policy import (
    CHAT_SPECIAL_TOKENS,
    CHAT_TEMPLATE,
    ChatPolicyConfig,
    build_chat_policy,
    train_chat_tokenizer,
)
from creditline.store import hash_directory

TINY = ChatPolicyConfig(
    hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64, max_positions=128,
    vocab_size=320,
)  # fmt: skip
ROUND_TRIP_EXAMPLES = [
    "",
    " ",
    "go key left 2 down 1",
    "line one\nline two\r\n\n\ttabbed  double  spaces ",
    "emoji 🙂👩‍💻🏳️‍🌈 and flags 🇫🇷",
    "héllo ß ﬁ Ω Å",
    "3 + 4 = 7\n12345678901234567890",
    "中文 日本語 한국어 العربية עברית",
    "\x00\x07\u200b\ufeff zero-width and control",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "<|im_sta rt|> <|im_end",
    "a . b 's c , d ?",
]
ROLES = ("system", "user", "assistant")


def corpus() -> list[str]:
    """A few hundred short lines like the built-in environments' observations and replies."""
    directions = ("left", "right", "up", "down")
    lines = [f"go key {directions[i % 4]} {i % 5} {directions[(i + 1) % 4]} {i % 3}" for i in range(200)]
    lines += [f"I move {directions[i % 4]}." for i in range(50)]
    lines += [f"{a} + {b} = {a + b}" for a in range(10) for b in range(10)]
    return lines


@pytest.fixture(scope="module")
def chat_policy_dir(tmp_path_factory):
    return build_chat_policy(tmp_path_factory.mktemp("chat") / "policy", corpus(), TINY)


@pytest.fixture(scope="module")
def chat_tokenizer(chat_policy_dir):
    return AutoTokenizer.from_pretrained(chat_policy_dir)


def test_checkpoint_is_a_hf_folder_that_transformers_loads(chat_policy_dir, chat_tokenizer):
    names = {p.name for p in chat_policy_dir.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert (chat_policy_dir / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(chat_policy_dir)
    assert model.config.model_type == "qwen2" and model.config.tie_word_embeddings
    assert model.config.vocab_size == len(chat_tokenizer) <= TINY.vocab_size
    assert chat_tokenizer.model_max_length == TINY.max_positions
    assert chat_tokenizer.chat_template == CHAT_TEMPLATE


def test_generation_prompt_is_chatml_without_a_default_system_message(chat_tokenizer):
    prompt = chat_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    conversation = [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": "go key left 2"},
        {"role": "assistant", "content": "I move left."},
    ]
    assert chat_tokenizer.apply_chat_template(conversation, tokenize=False) == (
        "<|im_start|>system\nPlay.<|im_end|>\n"
        "<|im_start|>user\ngo key left 2<|im_end|>\n"
        "<|im_start|>assistant\nI move left.<|im_end|>\n"
    )


def test_the_assistant_turn_ends_with_eos_and_the_model_agrees(chat_policy_dir, chat_tokenizer):
    turn_end_id = chat_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert chat_tokenizer.eos_token == "<|im_end|>" and chat_tokenizer.eos_token_id == turn_end_id
    assert chat_tokenizer.pad_token == "<|endoftext|>" and chat_tokenizer.bos_token is None
    model = AutoModelForCausalLM.from_pretrained(chat_policy_dir)
    assert model.config.eos_token_id == model.generation_config.eos_token_id == turn_end_id
    assert model.config.pad_token_id == model.generation_config.pad_token_id == chat_tokenizer.pad_token_id
    assert model.config.bos_token_id is None
    ids = chat_tokenizer.apply_chat_template(
        [{"role": "assistant", "content": "I move up."}], return_dict=False
    )
    content_ids = chat_tokenizer.encode("I move up.", add_special_tokens=False)
    newline_ids = chat_tokenizer.encode("\n", add_special_tokens=False)
    assert ids[-len(newline_ids) - 1 - len(content_ids) :] == [*content_ids, turn_end_id, *newline_ids]


def test_special_tokens_come_first_and_encode_to_single_ids_in_text(chat_tokenizer):
    assert chat_tokenizer.convert_tokens_to_ids(list(CHAT_SPECIAL_TOKENS)) == [0, 1, 2]
    assert chat_tokenizer.encode("", add_special_tokens=False) == []  # no BOS is added
    for token_id, token in enumerate(CHAT_SPECIAL_TOKENS):
        ids = chat_tokenizer.encode(f"go{token}left {token}", add_special_tokens=False)
        assert ids.count(token_id) == 2
        assert chat_tokenizer.convert_ids_to_tokens(ids).count(token) == 2


@pytest.mark.parametrize("text", ROUND_TRIP_EXAMPLES)
def test_examples_round_trip_through_the_tokenizer(chat_tokenizer, text):
    assert chat_tokenizer.decode(chat_tokenizer.encode(text, add_special_tokens=False)) == text


def test_text_is_normalised_to_nfc_as_qwen2_does(chat_tokenizer):
    decomposed = "e\u0301 A\u030a"
    ids = chat_tokenizer.encode(decomposed, add_special_tokens=False)
    assert chat_tokenizer.decode(ids) == unicodedata.normalize("NFC", decomposed) == "\u00e9 \u00c5"


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60))
def test_any_unicode_text_round_trips_to_its_nfc_form(chat_tokenizer, text):
    ids = chat_tokenizer.encode(text, add_special_tokens=False)
    assert chat_tokenizer.decode(ids) == unicodedata.normalize("NFC", text)
    assert chat_tokenizer.unk_token_id is None or chat_tokenizer.unk_token_id not in ids


@pytest.fixture(scope="module")
def trained_tokenizer():
    return train_chat_tokenizer(corpus(), TINY.vocab_size, model_max_length=TINY.max_positions)


def test_the_folder_loads_as_qwen2s_tokenizer(chat_tokenizer):
    # transformers 5 loads every qwen2 checkpoint's tokenizer with Qwen2Tokenizer, whatever the folder says
    assert type(chat_tokenizer).__name__ == "Qwen2Tokenizer"
    assert chat_tokenizer.unk_token is None and chat_tokenizer.bos_token is None


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60) | st.sampled_from(ROUND_TRIP_EXAMPLES))
def test_the_trained_and_the_loaded_tokenizer_encode_alike(trained_tokenizer, chat_tokenizer, text):
    expected = trained_tokenizer.encode(text, add_special_tokens=False)
    assert chat_tokenizer.encode(text, add_special_tokens=False) == expected


messages_strategy = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": st.text(max_size=30)}),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(messages=messages_strategy, data=st.data())
def test_rendering_is_prefix_stable_as_text_and_as_ids(chat_tokenizer, messages, data):
    k = data.draw(st.integers(min_value=1, max_value=len(messages)), label="k")
    prefix = chat_tokenizer.apply_chat_template(messages[:k], tokenize=False)
    whole = chat_tokenizer.apply_chat_template(messages, tokenize=False)
    assert whole.startswith(prefix)
    prefix_ids = chat_tokenizer.apply_chat_template(messages[:k], return_dict=False)
    whole_ids = chat_tokenizer.apply_chat_template(messages, return_dict=False)
    assert whole_ids[: len(prefix_ids)] == prefix_ids


def test_a_forward_pass_on_the_template_gives_logits_over_the_vocabulary(chat_policy_dir, chat_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(chat_policy_dir)
    batch = chat_tokenizer.apply_chat_template(
        [{"role": "user", "content": "go key left 2 down 1"}], add_generation_prompt=True, return_tensors="pt"
    )
    input_ids = batch["input_ids"]  # (1, T)
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits  # (1, T, V)
    assert logits.shape == (1, input_ids.shape[1], len(chat_tokenizer))
    assert torch.isfinite(logits).all()


def test_same_corpus_and_config_give_byte_identical_folders(tmp_path):
    first = build_chat_policy(tmp_path / "a", corpus(), TINY)
    second = build_chat_policy(tmp_path / "b", iter(corpus()), TINY)  # any iterable, consumed once
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir())
    for path in first.iterdir():
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name
    assert hash_directory(first) == hash_directory(second)
    reseeded = build_chat_policy(tmp_path / "c", corpus(), ChatPolicyConfig(**{**TINY.__dict__, "seed": 1}))
    assert (reseeded / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    assert (reseeded / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


def test_tokenizer_training_is_deterministic_and_learns_merges():
    first, second = train_chat_tokenizer(corpus(), 320), train_chat_tokenizer(corpus(), 320)
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert 3 + 256 < len(first) <= 320  # special tokens, bytes, then merges until no pair is left
    assert len(first.encode("go key left", add_special_tokens=False)) < len("go key left")


def test_building_leaves_the_callers_random_state_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_chat_policy(tmp_path / "p", corpus()[:20], TINY)
    assert torch.equal(torch.rand(3), expected)


def test_inconsistent_shapes_are_refused():
    with pytest.raises(ValueError, match="num_heads"):
        ChatPolicyConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        ChatPolicyConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="256 bytes"):
        train_chat_tokenizer(corpus(), vocab_size=100)
