"""One training row per multi-turn episode instead of one per turn: same loss, a fraction of the tokens.

A chat episode's step rows repeat its history: turn t's row holds the whole conversation up to turn t, so
training on the rows one by one pushes Σ_t |prompt_t| ≈ T²/2 turns of tokens through the model. Because
the conversation's token ids only grow (`creditline.rollout.conversation`: prompt_{t+1} starts with prompt_t +
completion_t), the last turn's row already contains every turn's completion, in the very context it was
sampled in. A causal model gives each of those tokens the same log-prob in the merged sequence as in its
own row, so one row per episode — every turn's completion tokens trained on, the environment's replies in
between kept as context only — gives the same per-token terms, hence the same token-level loss and
gradients, from about T times fewer tokens.

Where a turn's prompt does not extend the previous turn's prompt + completion (plain prompts, where each
turn's prompt is the current observation alone, or a history an environment rewrote), the merge stops and
the turn starts a new row: best-effort interleaving, the rule prime-rl applies to verifiers rollouts
(`interleave_rollout`), so the same rows are trained here and exported to prime-rl
(`creditline.interop.export`).

Shapes: the input rows are the step rows (`episode_id`, `step_idx`, `prompt_ids`, `completion_ids`,
`completion_logprobs`, `completion_advantages`); the output has the same list columns plus
`sampled_mask` (one 0/1 per completion token), `episode_id` and `steps` (the step indices merged), one row
per maximal chain of turns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["prompt_ids", "completion_ids", "completion_logprobs", "completion_advantages", "sampled_mask"]
"""The list columns of a training row (what `creditline.train.trainer.pack` takes)."""


def merge_turns(rows: pd.DataFrame) -> pd.DataFrame:
    """The training rows of `rows`: each episode's turns merged while they chain (see the module doc).

    Ordered by (episode_id, first step); a row's sequences are lists or arrays. Only the episodes where a
    turn's prompt is at least as long as the previous turn's prompt + completion can chain and are walked turn
    by turn; every other turn (all of them with plain prompts) is its own row, built column-wise.
    """
    ordered = rows.sort_values(["episode_id", "step_idx"], kind="stable").reset_index(drop=True)
    prompt_length = ordered["prompt_ids"].map(len).to_numpy()
    held = prompt_length + ordered["completion_ids"].map(len).to_numpy()
    episode = ordered["episode_id"].to_numpy()
    may_extend = np.zeros(len(ordered), dtype=bool)
    may_extend[1:] = (episode[1:] == episode[:-1]) & (prompt_length[1:] >= held[:-1])
    walked = ordered["episode_id"].isin(set(episode[may_extend]))
    singles = ordered[~walked]
    parts = [
        pd.DataFrame(
            {  # the turn's own sequences, as they are (lists or arrays)
                "prompt_ids": singles["prompt_ids"].to_numpy(),
                "completion_ids": singles["completion_ids"].to_numpy(),
                "completion_logprobs": singles["completion_logprobs"].to_numpy(),
                "completion_advantages": singles["completion_advantages"].to_numpy(),
                "sampled_mask": [np.ones(len(x), dtype=np.int8) for x in singles["completion_ids"]],
                "episode_id": singles["episode_id"].to_numpy(),
                "steps": [[int(s)] for s in singles["step_idx"]],
            }
        )
    ]
    merged: list[dict] = []
    for _, turns in ordered[walked].groupby("episode_id", sort=False):
        current: dict | None = None
        for turn in turns.to_dict("records"):
            if current is not None and _extends(current, turn):
                _append(current, turn)
            else:
                if current is not None:
                    merged.append(current)
                current = _single(turn)
        assert current is not None  # a groupby group has at least one turn
        merged.append(current)
    parts.append(pd.DataFrame(merged, columns=[*COLUMNS, "episode_id", "steps"]))
    out = pd.concat(parts, ignore_index=True)
    out["first_step"] = [steps[0] for steps in out["steps"]]
    out = out.sort_values(["episode_id", "first_step"], kind="stable", ignore_index=True)
    return out[[*COLUMNS, "episode_id", "steps"]]


def _extends(row: dict, turn: dict) -> bool:
    """`turn`'s prompt starts with everything `row` holds (its prompt + completion so far)."""
    held = len(row["prompt_ids"]) + len(row["completion_ids"])
    prompt = turn["prompt_ids"]
    return len(prompt) >= held and list(prompt[:held]) == [*row["prompt_ids"], *row["completion_ids"]]


def _append(row: dict, turn: dict) -> None:
    """Add the environment's reply (context, not trained on) and `turn`'s completion to `row`."""
    reply = list(turn["prompt_ids"][len(row["prompt_ids"]) + len(row["completion_ids"]) :])
    completion = list(turn["completion_ids"])
    row["completion_ids"] += reply + completion
    row["completion_logprobs"] += [0.0] * len(reply) + list(turn["completion_logprobs"])
    row["completion_advantages"] += [0.0] * len(reply) + list(turn["completion_advantages"])
    row["sampled_mask"] += [0] * len(reply) + [1] * len(completion)
    row["steps"].append(int(turn["step_idx"]))


def _single(turn: dict) -> dict:
    values = [
        list(turn["prompt_ids"]),
        list(turn["completion_ids"]),
        list(turn["completion_logprobs"]),
        list(turn["completion_advantages"]),
        [1] * len(turn["completion_ids"]),
    ]
    return {
        **dict(zip(COLUMNS, values, strict=True)),
        "episode_id": turn["episode_id"],
        "steps": [int(turn["step_idx"])],
    }
