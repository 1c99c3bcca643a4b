"""The policy as a HF-format checkpoint folder: build the built-in tiny one, load, save atomically.

A checkpoint folder holds `config.json`, `model.safetensors`, `generation_config.json` and the
tokenizer files (`tokenizer.json`, `tokenizer_config.json`), so `transformers.AutoModelForCausalLM`
and vLLM load it as they load any model. The trainer adds `optimizer.pt` (AdamW state) so the next
round continues the same optimisation; loaders that do not know it ignore it.

The built-in policy is a tiny Llama initialised at random from a seed, with a word-level tokenizer
made by the `tokenizers` library from the built-in environments' vocabulary: every action and
observation word is one token, so a completion of one token is one action.

Loading and saving print no progress bars (transformers' "Loading weights" and "Writing model shards"): a
round loads and saves several checkpoints, and the bars would fill every run's log and the CLI's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from creditline.envs import builtin_vocabulary
from creditline.policy.hf import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from creditline.policy.hf import logging as transformers_logging
from creditline.store.files import atomic_directory

transformers_logging.disable_progress_bar()

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
OPTIMIZER_FILE = "optimizer.pt"


@dataclass(frozen=True)
class TinyPolicyConfig:
    """Shape of the built-in random policy (defaults measured to learn `maze` on 2 CPU cores)."""

    hidden_size: int = 64
    """Width of the residual stream."""
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_positions: int = 64
    """Longest prompt + completion in tokens; the built-in prompts are ~12 tokens."""
    seed: int = 0
    """Seed of the random initialisation."""


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: special tokens first, then `words`, split on whitespace."""
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *dict.fromkeys(words)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def build_tiny_policy(
    folder: str | Path, config: TinyPolicyConfig = TinyPolicyConfig(), extra_words: Sequence[str] = ()
) -> Path:
    """Write the built-in random policy as a checkpoint folder (atomically) and return its path.
    `extra_words` (a plugin environment's `vocabulary()`) follow the built-in words in the tokenizer."""
    tokenizer = build_tokenizer([*builtin_vocabulary(), *extra_words])
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    save_policy(model, tokenizer, folder)
    return Path(folder)


def load_policy(
    folder: str | Path, device: str = "cpu", sharded: bool = False
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Load any HF causal-LM checkpoint folder (the built-in one or a user's model). `sharded` (a torchrun
    rank): read whole on the CPU, then each block split across the ranks, this rank's part on `device`
    (`creditline.train.distributed.shard_blocks`), so no device ever holds the whole model."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder} is not a HF checkpoint folder (no config.json)")
    tokenizer = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if sharded:
        from creditline.train.distributed import shard_blocks

        shard_blocks(model, device)
    # HF's `to` is decorated with functools.wraps, which typeshed types as an unbound function
    return model.to(device), tokenizer  # type: ignore[arg-type]


def save_policy(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    folder: str | Path,
    optimizer_state: dict | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a checkpoint folder atomically: readers see the old folder or the whole new one. `state_dict`
    replaces the model's own (a sharded model's, gathered whole:
    `creditline.train.distributed.whole_state_dict`)."""
    with atomic_directory(folder) as tmp:
        # an HF model's method, which torch's `Module.__getattr__` stub types as `Tensor | Module`
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)  # type: ignore[operator]
        tokenizer.save_pretrained(tmp)
        if optimizer_state is not None:
            torch.save(optimizer_state, Path(tmp) / OPTIMIZER_FILE)
    return Path(folder)


def load_optimizer_state(folder: str | Path) -> dict | None:
    path = Path(folder) / OPTIMIZER_FILE
    return torch.load(path, weights_only=True) if path.exists() else None


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
