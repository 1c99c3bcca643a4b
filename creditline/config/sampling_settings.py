"""The sampling settings a round's rows were drawn with, which the trainer must score them at.

The importance ratio ρ = π_θ(y) / μ(y) compares the trainer's log-prob with the engine's sampling log-prob
μ, so π_θ must be the distribution the engine sampled from: the same temperature T and nucleus top-p
(`creditline.train.logprobs`). Each step row records its own (`temperature`, `top_p`, `top_k` columns of the
steps table): a generated round its `[rollouts]` values, an imported round what verifiers saved (classic
`metadata.json` `sampling_args`; v1 `calls[].sampling` per call). NaN means the source did not say; such
rows fall back to the experiment's `[rollouts]` temperature and top_p (rounds written before the columns
existed read the same way).

One round trains at one (T, top-p): a round whose rows name several is refused in one line, and so is a
`top_k` the trainer cannot reproduce (it scores the full vocabulary or the top-p nucleus, never a top-k
cut). Shapes: `steps` has S rows; the columns are optional.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

COLUMNS = ("temperature", "top_p", "top_k")


def sampling_problem(steps: pd.DataFrame) -> str | None:
    """Why the trainer cannot score `steps` at their own sampling settings, or None."""
    if "top_k" in steps:
        top_k = steps["top_k"].to_numpy(dtype=np.float64)  # (S,) NaN, ≤ 0 (vLLM's −1) = no cut
        if (cut := top_k[np.isfinite(top_k) & (top_k > 0)]).size:
            return (
                f"rollouts sampled with top_k={int(cut[0])}: the trainer cannot score a top-k cut "
                "(its π_θ would not be the distribution the engine sampled from); sample without top_k"
            )
    return _mixed(_recorded_pairs(steps))


def round_sampling(steps: pd.DataFrame, temperature: float, top_p: float) -> tuple[float, float]:
    """(temperature, top_p) to score `steps` at: their recorded values, else the given defaults (the
    experiment's `[rollouts]`). Raises ValueError where `sampling_problem` names one."""
    found = _recorded_pairs(steps, temperature, top_p)
    if problem := sampling_problem(steps) or _mixed(found):
        raise ValueError(problem)
    return found.pop() if found else (temperature, top_p)


def _mixed(found: set) -> str | None:
    if len(found) < 2:
        return None
    listed = ", ".join(f"temperature={t:g} top_p={p:g}" for t, p in sorted(found))
    return (
        f"rollouts sampled with {len(found)} different settings ({listed}): one round trains at one "
        "temperature and top_p; import each setting's rollouts as a round of its own"
    )


def _recorded_pairs(steps: pd.DataFrame, temperature: float = math.nan, top_p: float = math.nan) -> set:
    """The distinct (temperature, top_p) of the rows. A row without a temperature reads as the given
    pair (rows without a record are left out when it is NaN); one with a temperature but no top_p was
    sampled without a nucleus (top_p absent from the same sampling arguments: 1.0)."""
    if "temperature" not in steps:
        return set() if math.isnan(temperature) else {(temperature, top_p)}
    t = steps["temperature"].to_numpy(dtype=np.float64)  # (S,)
    p = steps["top_p"].to_numpy(dtype=np.float64) if "top_p" in steps else np.full(len(steps), np.nan)  # (S,)
    recorded = ~np.isnan(t)
    pairs = set(zip(t[recorded].tolist(), np.nan_to_num(p[recorded], nan=1.0).tolist(), strict=True))
    if not recorded.all() and not math.isnan(temperature):
        pairs.add((temperature, top_p))
    return pairs
