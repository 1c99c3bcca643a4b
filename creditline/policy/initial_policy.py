"""The policy round 1 starts from: a built-in one made here, or a user's HF folder, optionally warm-started.

- `builtin:tiny`: the tiny word-level Llama (`creditline.policy.models`), one token per action, plain prompts;
its
  vocabulary is the built-in environments' words, then a plugin environment's `vocabulary()`;
- `builtin:chat`: a small Qwen2 chat model (`creditline.policy.chat_policy`) whose byte-level BPE tokenizer is
  trained on the experiment's environment text (`environment_corpus`);
- any other value: the path of a local HF checkpoint folder, used as it is.

With `[warm_start] episodes > 0` the policy is then fitted to random well-formed actions
(`creditline.train.warm_start`) and saved as a new folder; the result is the experiment's round-0 checkpoint,
and what was done (demonstrations, loss before and after, the folder it started from) goes into its
lineage record.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from creditline.config import ExperimentConfig
from creditline.envs import BUILTIN_ENVIRONMENTS
from creditline.policy import BUILTIN_CHAT_POLICY, BUILTIN_POLICY
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy, environment_corpus
from creditline.policy.models import TinyPolicyConfig, build_tiny_policy, load_policy, save_policy
from creditline.store import hash_path
from creditline.train.warm_start import warm_start


def build_initial_policy(config: ExperimentConfig, folder: Path) -> tuple[Path, dict[str, Any]]:
    """The initial policy's folder (built under `folder` unless it is a user's untouched folder) and the
    facts its lineage record keeps."""
    if config.initial_policy == BUILTIN_POLICY:
        extra = [] if config.env.name in BUILTIN_ENVIRONMENTS else list(config.env.build().vocabulary())
        source = build_tiny_policy(folder, TinyPolicyConfig(seed=config.seed), extra)
    elif config.initial_policy == BUILTIN_CHAT_POLICY:
        source = build_chat_policy(
            folder, environment_corpus(config.env.build, seed=config.seed), ChatPolicyConfig(seed=config.seed)
        )
    else:
        source = Path(config.initial_policy).expanduser().resolve()
        if not (source / "config.json").exists():
            raise FileNotFoundError(f"initial_policy {source} is not a HF checkpoint folder (no config.json)")
    meta: dict[str, Any] = {
        "source": config.initial_policy if config.initial_policy.startswith("builtin:") else "user"
    }
    settings = config.warm_start
    if settings.episodes == 0:
        return source, meta
    started_from = hash_path(source)
    model, tokenizer = load_policy(source)
    facts = warm_start(
        model, tokenizer, config.env.build, settings, config.seed, config.rollouts.prompt_format
    )
    save_policy(model, tokenizer, folder)
    meta["warm_start"] = {
        **facts,
        "episodes": settings.episodes,
        "epochs": settings.epochs,
        "learning_rate": settings.learning_rate,
        "started_from": started_from,
    }
    if source != folder:  # a user's folder, left as it was (a built-in one is overwritten by the warm start)
        meta["warm_start"]["started_from_path"] = str(source)
    return folder, meta


def initial_vocab_size(config: ExperimentConfig) -> int:
    """The vocabulary size of the experiment's policy, found without writing anything where it is kept:
    a user's folder is read, a built-in policy built (without its warm start, which keeps the vocabulary)
    in a temporary folder. Training never changes it, so it holds for every round's parent too; an import
    checks its token ids against it before anything is registered (`creditline import verifiers`)."""
    with tempfile.TemporaryDirectory(prefix="creditline-vocab-") as tmp:
        bare = replace(config, warm_start=replace(config.warm_start, episodes=0))
        folder, _ = build_initial_policy(bare, Path(tmp))
        return int(json.loads((folder / "config.json").read_text())["vocab_size"])
