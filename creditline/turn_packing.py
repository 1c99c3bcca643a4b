"""One training row per multi-turn episode instead of one per turn: same loss, a fraction of the tokens.

A chat episode's step rows repeat its history: turn t's row holds the whole conversation up to turn t, so
training on the rows one by one pushes Σ_t |prompt_t| ≈ T²/2 turns of tokens through the model. Because
the conversation's token ids only grow (`creditline.conversation`: prompt_{t+1} starts with prompt_t +
completion_t), the last turn's row already contains every turn's completion, in the very context it was
sampled in. A causal model gives each of those tokens the same log-prob in the merged sequence as in its
own row, so one row per episode — every turn's completion tokens trained on, the environment's replies in
between kept as context only — gives the same per-token terms, hence the same token-level loss and
gradients, from about T times fewer tokens.

Episodes whose rows do not chain that way (plain prompts, where each turn's prompt is the current
observation alone) keep one row per step.

Shapes: the input rows are the step rows (`episode_id`, `step_idx`, `prompt_ids`, `completion_ids`,
`completion_logprobs`, `completion_advantages`); the output has the same list columns plus
`sampled_mask` (one 0/1 per completion token) and one row per merged episode or unmerged step.
"""

from __future__ import annotations

import pandas as pd

COLUMNS = ["prompt_ids", "completion_ids", "completion_logprobs", "completion_advantages", "sampled_mask"]


def merge_turns(rows: pd.DataFrame) -> pd.DataFrame:
    """The training rows of `rows`, each chained episode merged into one (see the module doc)."""
    merged: list[dict] = []
    for _, episode in rows.sort_values(["episode_id", "step_idx"], kind="stable").groupby(
        "episode_id", sort=False
    ):
        turns = episode.to_dict("records")
        if len(turns) > 1 and _chained(turns):
            merged.append(_merge(turns))
        else:
            merged += [_single(turn) for turn in turns]
    return pd.DataFrame(merged, columns=COLUMNS)


def _chained(turns: list[dict]) -> bool:
    """Each turn's prompt starts with the previous turn's prompt + completion."""
    for before, after in zip(turns, turns[1:], strict=False):
        sampled = len(before["prompt_ids"]) + len(before["completion_ids"])
        if len(after["prompt_ids"]) < sampled or list(after["prompt_ids"][:sampled]) != [
            *before["prompt_ids"],
            *before["completion_ids"],
        ]:
            return False
    return True


def _merge(turns: list[dict]) -> dict:
    first_prompt = list(turns[0]["prompt_ids"])
    ids, logprobs, advantages, sampled = [], [], [], []
    for turn, following in zip(turns, [*turns[1:], None], strict=True):
        completion = list(turn["completion_ids"])
        ids += completion
        logprobs += list(turn["completion_logprobs"])
        advantages += list(turn["completion_advantages"])
        sampled += [1] * len(completion)
        if following is not None:  # the environment's reply: context, not trained on
            reply = list(following["prompt_ids"][len(first_prompt) + len(ids) :])
            ids += reply
            logprobs += [0.0] * len(reply)
            advantages += [0.0] * len(reply)
            sampled += [0] * len(reply)
    return dict(zip(COLUMNS, [first_prompt, ids, logprobs, advantages, sampled], strict=True))


def _single(turn: dict) -> dict:
    values = [list(turn["prompt_ids"]), list(turn["completion_ids"]), list(turn["completion_logprobs"]),
              list(turn["completion_advantages"]), [1] * len(turn["completion_ids"])]  # fmt: skip
    return dict(zip(COLUMNS, values, strict=True))
