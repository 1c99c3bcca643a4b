"""Warm start: a short supervised pass that teaches a fresh policy the action format, not the task.

A randomly initialised chat policy with a BPE vocabulary almost never writes a valid action (a move word
followed by `<|im_end|>` is a few tokens out of hundreds each), so reinforcement learning has no signal to
start from. The warm start plays demonstration episodes in which every action is the environment's
`format_example`: well-formed, drawn at random, blind to the state. Fitting them teaches how to answer
(one word, then end the turn), and nothing about which answer is right: the warm-started policy answers
validly and at random, and the task is left to RL.

The demonstrations are played by the same turn loop as the rollouts (`run_episodes` with a
`DemonstrationEngine`), so their prompts have exactly the rollouts' token layout (system message,
conversation growth, generation prompts). The loss is the mean negative log-likelihood of the completion
tokens, L = −(1/N) Σ_t log π(y_t | x, y_<t) at temperature 1, over minibatches of episodes (one training
row each, `creditline.rollout.turn_packing`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import torch

from creditline.config.stage_settings import WarmStartSettings
from creditline.engines.base import Completion, SamplingParams
from creditline.envs.base import Environment
from creditline.ids import derive_seed
from creditline.rollout.episodes import run_episodes
from creditline.rollout.turn_packing import merge_turns
from creditline.train.trainer import TrainConfig, micro_batches, pack, rows_logprobs, score
from creditline.train.training_loop import adamw, minibatch_updates

WEIGHT_DECAY = 0.01
"""AdamW's default decoupled weight decay, which the warm start has always used."""
MAX_GRAD_NORM = 1.0
"""The gradient norm each step is clipped to."""

DEMONSTRATION_EXPERIMENT = "warm-start"
"""The experiment name the demonstration episodes' ids are derived from (they are never stored)."""


class DemonstrationEngine:
    """An `Engine` that answers every prompt with a random well-formed action and the EOS."""

    def __init__(self, tokenizer, example: Callable[[random.Random], str], context_length: int | None):
        self.tokenizer, self.example = tokenizer, example
        self.eos_token_id = tokenizer.eos_token_id
        self.context_length = context_length

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        rng = random.Random(params.seed)
        completions = []
        for _ in prompts:
            ids = [*self.tokenizer.encode(self.example(rng), add_special_tokens=False), self.eos_token_id]
            completions.append(Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop"))
        return completions


def demonstrations(
    tokenizer,
    env_factory: Callable[[], Environment],
    episodes: int,
    seed: int,
    prompt_format: str,
    context_length: int | None,
):
    """The step rows (prompt_ids, completion_ids, …) of `episodes` demonstration episodes."""
    engine = DemonstrationEngine(tokenizer, env_factory().format_example, context_length)
    rng = np.random.default_rng([seed, 0xD3E0])  # tasks drawn apart from any round's
    tasks = sorted(int(t) for t in rng.choice(1_000_000, size=episodes, replace=False))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=1, seed=derive_seed(seed, "warm-start"))
    return run_episodes(
        engine, tokenizer, env_factory, DEMONSTRATION_EXPERIMENT, 0, tasks, 1, sampling, prompt_format
    ).steps


def warm_start(
    model: torch.nn.Module,
    tokenizer,
    env_factory: Callable[[], Environment],
    settings: WarmStartSettings,
    seed: int,
    prompt_format: str,
) -> dict[str, float]:
    """Fit `model` in place to demonstrations; return the loss before and after and the rows used."""
    steps = demonstrations(
        tokenizer,
        env_factory,
        settings.episodes,
        seed,
        prompt_format,
        getattr(model.config, "max_position_embeddings", None),
    )
    zeros = [[0.0] * len(c) for c in steps["completion_ids"]]
    packed = merge_turns(steps.assign(completion_logprobs=zeros, completion_advantages=zeros))
    batch = pack(
        packed["prompt_ids"],
        packed["completion_ids"],
        packed["completion_logprobs"],
        packed["completion_advantages"],
        tokenizer.pad_token_id,
        packed["sampled_mask"],
    )
    rows = batch.input_ids.shape[0]
    memory = TrainConfig()  # the trainer's micro-batch and log-prob chunk sizes
    optimizer = adamw(model.parameters(), settings.learning_rate, WEIGHT_DECAY)
    order_seed = derive_seed(seed, "warm-start", "order")
    loss_before = _mean_nll(model, batch)
    model.train()

    def accumulate(index: torch.Tensor) -> None:
        """Add ∂/∂θ of the batch's mean next-token loss over its completion tokens to .grad."""
        tokens = batch.completion_mask[index].sum()
        for part in micro_batches(batch.attention_mask[index].sum(-1), memory.micro_batch_tokens):
            logp, *_ = rows_logprobs(model, batch, index[part], memory, temperature=1.0, top_p=1.0)
            (-logp.sum() / tokens).backward()

    def split(order: torch.Tensor) -> list[torch.Tensor]:
        return [order[start : start + settings.batch_rows] for start in range(0, rows, settings.batch_rows)]

    for _ in minibatch_updates(
        optimizer, model.parameters, rows, settings.epochs, order_seed, split, accumulate, MAX_GRAD_NORM
    ):
        pass  # the warm start keeps no per-step metrics: the loss before and after says what it did
    model.eval()
    return {"rows": float(len(steps)), "loss_before": loss_before, "loss_after": _mean_nll(model, batch)}


def _mean_nll(model: torch.nn.Module, batch) -> float:
    """−(1/N) Σ log π(y) over every completion token of `batch`."""
    return float(
        -score(model, batch, temperature=1.0)[batch.completion_mask].sum() / batch.completion_mask.sum()
    )
