"""A small chat policy built offline: a Qwen2-architecture model with a BPE tokenizer and a ChatML template.

The built-in policy (`creditline.policy.models`) has a word-level tokenizer, so one action is one token. Real
policies are chat models: a byte-level BPE tokenizer, special tokens that delimit turns, a chat template
that turns a list of messages into a prompt, and an EOS token that ends the assistant's turn. This module
builds such a policy at random initialisation without downloading anything, so that the chat code paths
(templating, multi-token completions, stopping on `<|im_end|>`, loading in transformers and vLLM) can be
exercised on a CPU in seconds.

The parts mirror Qwen2.5's:

- the tokenizer is byte-level BPE trained on a caller's corpus with the `tokenizers` library, with
  Qwen2's text pipeline: NFC normalisation, Qwen2's pre-tokenization regex (numbers split into single
  digits), then bytes. It must be Qwen2's pipeline, not one of our choosing: transformers 5 loads the
  tokenizer of any `qwen2` checkpoint with `Qwen2Tokenizer`, which keeps only the vocabulary and merges
  of `tokenizer.json` and rebuilds the normaliser and pre-tokenizer itself (so does vLLM, which loads
  through `AutoTokenizer`). Training with the same pipeline makes the tokenizer returned here and the one
  loaded from the folder encode alike. Every string encodes without an unknown token and decodes to its
  NFC form, which is itself for almost all text (emoji, newlines, CJK); a decomposed accent comes back
  composed.
- the special tokens come first in the vocabulary: `<|endoftext|>` (padding), `<|im_start|>` and
  `<|im_end|>` (the EOS: the assistant's turn ends with it). There is no BOS token, as in Qwen.
- the chat template is ChatML without Qwen's default system message: each message renders as
  `<|im_start|>{role}\\n{content}<|im_end|>\\n`, and the generation prompt is `<|im_start|>assistant\\n`.
  Rendering is message by message, so the rendering of `messages[:k]` is a prefix of the rendering of
  `messages`, as strings and as token ids (messages meet at `<|im_end|>\\n<|im_start|>`, and encoding
  splits the text at special tokens before anything else).
  The newline after `<|im_end|>` belongs to the template, not to the completion: a sampled turn stops at
  `<|im_end|>`, and code that appends sampled ids to a conversation must add that newline's id itself.
- the model is `Qwen2ForCausalLM` (grouped-query attention, SwiGLU, RMSNorm, RoPE, tied embeddings)
  initialised from a seed, with the model's vocabulary the trained tokenizer's size.

Training the tokenizer and initialising the model are both deterministic, so the same corpus and config
give byte-identical files and the same content hash for the checkpoint folder.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from creditline.policy.hf import PRETOKENIZE_REGEX, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from creditline.policy.models import save_policy

PAD_TOKEN = "<|endoftext|>"
TURN_START_TOKEN = "<|im_start|>"
TURN_END_TOKEN = "<|im_end|>"
CHAT_SPECIAL_TOKENS = (PAD_TOKEN, TURN_START_TOKEN, TURN_END_TOKEN)
"""In vocabulary order: their ids are 0, 1 and 2."""
BYTE_ALPHABET_SIZE = 256

CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)
"""ChatML as Qwen2.5 writes it, without the default system message and without tool calls."""


@dataclass(frozen=True)
class ChatPolicyConfig:
    """Shape of the random chat policy (the defaults give ~0.35M parameters and a head size of 32)."""

    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 2
    """Number of transformer blocks."""
    num_heads: int = 4
    """Query heads per block; the head size is `hidden_size / num_heads`."""
    num_kv_heads: int = 2
    """Key/value heads per block (grouped-query attention); divides `num_heads`."""
    intermediate_size: int = 256
    """Width of the SwiGLU feed-forward layer."""
    max_positions: int = 512
    """Longest prompt + completion in tokens; also the tokenizer's `model_max_length`."""
    vocab_size: int = 512
    """Target size of the BPE vocabulary: 3 special tokens, 256 bytes, then merges. The model's vocabulary
    is the trained tokenizer's actual size, which is smaller when the corpus runs out of pairs to merge."""
    seed: int = 0
    """Seed of the random initialisation."""

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )


def train_chat_tokenizer(
    corpus: Iterable[str], vocab_size: int = 512, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `corpus` and dress it as a chat tokenizer (template, EOS, pad).

    Deterministic: the same corpus gives the same merges in the same order, so the same `tokenizer.json`.
    With a small corpus the vocabulary stops short of `vocab_size` when no pair is left to merge.
    """
    smallest = len(CHAT_SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE
    if vocab_size < smallest:
        raise ValueError(f"vocab_size {vocab_size} < {smallest} (special tokens + the 256 bytes)")
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()  # the pipeline Qwen2Tokenizer rebuilds on load, see the module doc
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(CHAT_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen in the corpus or not
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=TURN_END_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,  # saved as null, as Qwen2.5 does, so that loaders do not add defaults
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,  # keep " ." and " 's" as encoded
    )


def chat_model_config(config: ChatPolicyConfig, tokenizer: PreTrainedTokenizerFast) -> Qwen2Config:
    """The Qwen2 architecture at `config`'s size, with the vocabulary and special ids of `tokenizer`."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_chat_policy(
    folder: str | Path, corpus: Iterable[str], config: ChatPolicyConfig = ChatPolicyConfig()
) -> Path:
    """Write a random chat policy trained on `corpus` as a checkpoint folder (atomically); return its path."""
    tokenizer = train_chat_tokenizer(corpus, config.vocab_size, model_max_length=config.max_positions)
    with torch.random.fork_rng(devices=[]):  # seed the initialisation without touching the caller's RNG
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(chat_model_config(config, tokenizer))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    save_policy(model, tokenizer, folder)
    return Path(folder)


def environment_corpus(env_factory, episodes: int = 200, seed: int = 0) -> list[str]:
    """Texts to train the tokenizer on: the environment's instructions, the observations of `episodes`
    episodes played with random well-formed actions, and those actions. Deterministic in `seed`."""
    rng = random.Random(f"corpus:{seed}")
    env = env_factory()
    texts = [env.instructions]
    for episode in range(episodes):
        observation = env.reset(episode, seed)
        texts.append(observation.text)
        for _ in range(env.max_steps):
            action = env.format_example(rng)
            transition = env.step(action)
            texts += [action, transition.observation.text]
            if transition.done or transition.truncated:
                break
    return texts
