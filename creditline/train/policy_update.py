"""One round's policy update: the parent policy trained on the round's step rows and their advantages.

The round's training stage (`creditline.round.train_policy`, which the `checkpoint` asset and the benchmarks
call) runs `update_policy`. A multi-turn chat episode is trained as one row
(`creditline.rollout.turn_packing`). The sampling temperature and top-p the round's rows were drawn with
(`creditline.config.sampling_settings`: recorded per row, the experiment's `[rollouts]` where a source saved
none) are the trainer's (ρ compares like with like) and the minibatch order is seeded from (seed, round,
"train").
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from creditline.config import ExperimentConfig
from creditline.config.sampling_settings import round_sampling
from creditline.ids import derive_seed
from creditline.policy.models import load_policy
from creditline.rollout.turn_packing import merge_turns
from creditline.train.distributed import is_sharded
from creditline.train.trainer import pack, score, train


def update_policy(
    model: torch.nn.Module,
    pad_token_id: int,
    rows: pd.DataFrame,
    config: ExperimentConfig,
    round_: int,
    optimizer_state: dict | None,
    reference_policy: str | Path | None = None,
) -> tuple[list[dict], dict]:
    """Train `model` in place on `rows` (`creditline.round.training_rows`); return (per-update metrics,
    optimiser state).

    `reference_policy` is the folder of π_ref, loaded only when `[train] kl_coef` > 0.
    """
    packed = merge_turns(rows)  # one row per chat episode: same loss, ~T× fewer tokens
    batch = pack(
        packed["prompt_ids"],
        packed["completion_ids"],
        packed["completion_logprobs"],
        packed["completion_advantages"],
        pad_token_id,
        packed["sampled_mask"],
    )
    # the rows' own sampling settings (imported rounds: what the source saved), else [rollouts]'
    temperature, top_p = round_sampling(rows, config.rollouts.temperature, config.rollouts.top_p)
    if config.train.kl_coef > 0:
        if reference_policy is None:
            raise ValueError("[train] kl_coef > 0 needs a reference policy")
        # π_ref sharded like π_θ: a model that needs sharding needs it twice
        device = str(next(model.parameters()).device)
        reference, _ = load_policy(reference_policy, device, sharded=is_sharded(model))
        batch = replace(
            batch, reference_logprobs=score(reference.eval(), batch, temperature, config.train, top_p)
        )
        del reference
    seed = derive_seed(config.seed, round_, "train")
    return train(model, batch, config.train, temperature, seed, optimizer_state, top_p)
