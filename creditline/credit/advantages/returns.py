"""Discounted step returns on a step table (GiGPO Eq. 5), aligned with the input rows.

    R_t = Σ_{k≥t} γ^{k−t} r_k        per episode, by step_idx, r = step_reward

verl-agent's ``compute_step_discounted_returns`` is O(S²) (``np.where`` per row) and relies on
batch order; this one sorts by (episode_id, step_idx) and recurses backwards over step depth,
vectorised over episodes: O(S) work, max-episode-length numpy passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import scatter
from .segments import discounted_suffix_sum
from .table import build_step_table


def discounted_returns(steps: Any, gamma: float) -> np.ndarray:
    """R (S,) float64 aligned with ``steps`` rows; needs episode_id, step_idx, step_reward."""
    table = build_step_table(steps, ("episode_id", "step_idx", "step_reward"))
    return scatter(
        table, discounted_suffix_sum(table.step_reward, table.ep_start, table.ep_len, float(gamma))
    )
