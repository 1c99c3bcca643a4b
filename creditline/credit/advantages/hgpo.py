"""HGPO — Hierarchy-of-Groups Policy Optimization (arXiv 2602.22817, ICLR 2026).

Reference code: verl-agent @20bd331 ``recipe/hgpo/core_hgpo.py``. Within each group_id, the
step at time t of an episode belongs, for every k = 1 … min(H+1, t+1), to the cluster keyed
by (group, k, (o_{t−k+1}, …, o_t)): the same current anchor and the same k−1 anchors before
it (k = 1 is GiGPO's anchor group; the step index is not part of the key). With R the
discounted step return (GiGPO Eq. 5) and a cluster C of size ≥ 2 (size-1 clusters carry no
relative signal and are skipped):

    a_k   = (R − μ_C) / (σ_C + ε)              ("mean_std_norm"; "mean_norm": R − μ_C)
    w_k   = (k+1)^α / (Σ_{k' kept} (k'+1)^α + weight_eps)
    A     = Σ_{k kept} w_k · a_k                (0 if no level is kept)

``base_group=True`` adds the level (0, A^E) with weight 1^α = 1, A^E the GiGPO episode
advantage (Eq. 3; σ iff mean_std_norm). ``conventions="verl-agent"`` reproduces verl-agent
@20bd331 (HGPO exists only there, so there is no ``"verl"`` preset): population σ in clusters,
unbiased cross-step σ for the base level, ε=1e-6 on σ and in the
weight normaliser, and levels with a_k == 0 dropped before weighting (an exactly average step
loses that level; the creditline default keeps it).

Vectorised: anchors are int codes; the window key of level k is the dense code of
(key_{k−1}[i], anchor[i−k+1]) over the rows with step_idx ≥ k−1 (rows are sorted by
(episode, step), so i−k+1 is the same episode). One hash factorisation and one bincount pass
per level: O(S·(H+1)). A level-k cluster lies inside a level-(k−1) cluster, so a row alone at
level k−1 is alone at every level after (no signal, skipped): each level keys only the rows that
shared a cluster at the one before, which leaves every kept cluster and its statistics unchanged.
"""

from __future__ import annotations

import numpy as np

from .conventions import VERL_AGENT_HGPO, Conventions
from .gigpo import check_mode, step_returns
from .outcome import episode_advantage
from .registry import register
from .segments import group_zscore, pair_codes
from .table import StepTable


def _add_level(num, den, rows, a, present, weight, conv: Conventions) -> None:
    """num[rows] += w·a, den[rows] += w over the kept items of one level (in place)."""
    keep = present & (a != 0.0) if conv.drop_zero_levels else present
    num[rows] += np.where(keep, weight * a, 0.0)
    den[rows] += np.where(keep, weight, 0.0)


@register("hgpo", references={"verl-agent": VERL_AGENT_HGPO}, anchors=True)
def hgpo(
    table: StepTable,
    conv: Conventions,
    *,
    mode: str = "mean_std_norm",
    gamma: float = 0.95,
    history_length: int = 2,
    length_weight_alpha: float = 1.0,
    base_group: bool = False,
) -> np.ndarray:
    """Length-weighted mean of the history-consistent group advantages, per step row (S,)."""
    scale = check_mode(mode)
    if int(history_length) != history_length or history_length < 0:
        raise ValueError(f"history_length must be an integer >= 0, got {history_length!r}")
    assert table.anchor is not None and table.anchor_values is not None
    n_rows, n_anchor = table.n_rows, len(table.anchor_values)
    returns = step_returns(table, gamma)  # (S,)
    num = np.zeros(n_rows)  # (S,) Σ w_k a_k
    den = np.zeros(n_rows)  # (S,) Σ w_k
    all_rows = np.arange(n_rows)
    if base_group:
        base = episode_advantage(table, conv, scale=scale)
        _add_level(num, den, all_rows, base, np.ones(n_rows, dtype=bool), 1.0, conv)

    rows = all_rows  # rows that have a window of length k
    key, n_keys = pair_codes(table.group, table.anchor, n_anchor)  # (S,) level-1 key
    size = np.full(n_rows, 2)  # (len(rows),) the size of each row's cluster at the level before
    for k in range(1, int(history_length) + 2):
        if k > 1:
            # rows with a window of length k that shared their level-(k−1) cluster
            carried = (table.step_idx[rows] >= k - 1) & (size >= 2)
            rows = rows[carried]
            if rows.size == 0:
                break
            key, n_keys = pair_codes(key[carried], table.anchor[rows - (k - 1)], n_anchor)
        size = np.bincount(key, minlength=n_keys)[key]  # (len(rows),)
        a = group_zscore(
            returns[rows],
            key,
            n_keys,
            ddof=conv.ddof_step,
            eps_sigma=conv.eps_sigma,
            eps_var=conv.eps_var,
            singleton="zero",
            scale=scale,
        )
        _add_level(num, den, rows, a, size >= 2, float(k + 1) ** float(length_weight_alpha), conv)

    out = np.zeros(n_rows)
    np.divide(num, den + conv.weight_eps, out=out, where=den > 0)
    return out
