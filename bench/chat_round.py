"""A multi-turn chat round on CPU: rollout throughput, and the training tokens that turn packing saves.

1. Rollouts: batched turns vs one `model.generate` per episode. Both sides play the same episodes through the same turn loop (`creditline.rollout.episodes.run_episodes`: chat
template, token-preserving conversations, the environment's parse rule); only the generation differs:

- batched: `TorchEngine`, every active episode's turn in one left-padded batch with a KV cache;
- per episode: what a first multi-turn loop usually does, `model.generate` on one prompt at a time
  (transformers' own sampling with a KV cache; the log-prob of each sampled token from its scores).

   It prints the generated tokens per second of each and their ratio on a line of its own.
2. Training on the batched side's round: one row per step (each turn's row repeats the conversation so
   far) vs one row per episode (`creditline.rollout.turn_packing`), one epoch of the same update each. It prints
   the tokens through the model and the seconds of each, and their ratios.

    .venv/bin/python bench/chat_round.py [--tasks 32] [--group 4] [--max-steps 8] [--max-new-tokens 8]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from creditline.engines import Completion, SamplingParams, TorchEngine
from creditline.envs import make_env
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy, environment_corpus
from creditline.policy.models import load_policy
from creditline.rollout.episodes import run_episodes
from creditline.rollout.turn_packing import merge_turns
from creditline.train.trainer import TrainConfig, pack, train


class PerEpisodeGenerate:
    """An `Engine` that calls `model.generate` once per prompt."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        self.context_length = model.config.max_position_embeddings

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        torch.manual_seed(params.seed)
        completions = []
        for prompt in prompts:
            out = self.model.generate(
                torch.tensor([list(prompt)]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0,
                max_new_tokens=params.max_new_tokens, eos_token_id=self.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id, output_logits=True, return_dict_in_generate=True,
            )  # fmt: skip
            tokens = out.sequences[0, len(prompt) :].tolist()
            logps = [torch.log_softmax(logits[0].float() / params.temperature, -1)[token].item()
                     for logits, token in zip(out.logits, tokens, strict=False)]  # fmt: skip
            end = tokens.index(self.eos_token_id) + 1 if self.eos_token_id in tokens else len(tokens)
            reason = "stop" if self.eos_token_id in tokens else "length"
            completions.append(Completion(tokens[:end], logps[:end], reason))
        return completions


def measure(engine, tokenizer, env, args) -> tuple[float, int, float, object]:
    """(tokens/s, tokens generated, seconds, step rows) of one rollout of `args.tasks` × `args.group` episodes."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    run_episodes(engine, tokenizer, env, "warm-up", 0, [0], 1, sampling, "chat")  # first calls are slower
    start = time.perf_counter()
    tables = run_episodes(
        engine, tokenizer, env, "bench", 1, list(range(args.tasks)), args.group, sampling, "chat"
    )
    seconds = time.perf_counter() - start
    tokens = int(tables.steps["completion_ids"].map(len).sum())
    return tokens / seconds, tokens, seconds, tables.steps


def training_epoch(model, steps, pad_token_id: int, merged: bool) -> tuple[int, float]:
    """(tokens through the model, seconds) of one epoch of the round's update, rows per step or per episode."""
    generator = torch.Generator().manual_seed(0)
    rows = steps.assign(completion_advantages=[torch.randn(len(c), generator=generator).tolist()
                                               for c in steps["completion_ids"]])  # fmt: skip
    if merged:
        rows = merge_turns(rows)
    batch = pack(rows["prompt_ids"], rows["completion_ids"], rows["completion_logprobs"],
                 rows["completion_advantages"], pad_token_id, rows.get("sampled_mask"))  # fmt: skip
    start = time.perf_counter()
    train(copy.deepcopy(model), batch, TrainConfig(epochs=1, minibatches=4), temperature=1.0, seed=0)
    return int(batch.attention_mask.sum()), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(2)

    def env():
        return make_env("maze", size=5, max_steps=args.max_steps)

    folder = build_chat_policy(Path(tempfile.mkdtemp()) / "chat", environment_corpus(env), ChatPolicyConfig())
    model, tokenizer = load_policy(folder)
    episodes = args.tasks * args.group
    print(f"chat policy: {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer)}; "
          f"{episodes} maze episodes of up to {args.max_steps} turns, ≤ {args.max_new_tokens} tokens per turn")  # fmt: skip
    batched = measure(
        TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id), tokenizer, env, args
    )
    single = measure(PerEpisodeGenerate(model, tokenizer), tokenizer, env, args)
    for name, (rate, tokens, seconds, _) in (("batched turns (TorchEngine)", batched),
                                             ("model.generate per episode", single)):  # fmt: skip
        print(f"  {name:<28} {tokens:>6} tokens in {seconds:6.1f} s: {rate:8.0f} tokens/s")
    print(f"rollout tokens/s: {batched[0] / single[0]:.1f}× more (batched)")
    steps = batched[3]
    per_step = training_epoch(model, steps, tokenizer.pad_token_id, merged=False)
    per_episode = training_epoch(model, steps, tokenizer.pad_token_id, merged=True)
    print(
        f"training one epoch on that round ({len(steps)} step rows, {steps['episode_id'].nunique()} episodes):"
    )
    for name, (tokens, seconds) in (("one row per step", per_step), ("one row per episode", per_episode)):
        print(f"  {name:<28} {tokens:>8} tokens in {seconds:6.1f} s")
    print(f"training tokens: {per_step[0] / per_episode[0]:.1f}× fewer, "
          f"time: {per_step[1] / per_episode[1]:.1f}× less (one row per episode)")  # fmt: skip


if __name__ == "__main__":
    main()
