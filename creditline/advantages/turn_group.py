"""Turn-index groups: A²TGPO and MatchTIR (per-(group, turn index) normalisation).

Both normalise a per-turn quantity within the (group_id, step_idx) group — all episodes of a
prompt group at the same turn index — and add an outcome (episode) advantage.

``variant="a2tgpo"`` (A²TGPO; reference: its code copy in the IGPO fork @745078b, notes in advantage-estimators.md):

    n̂_{i,t} = (r_{i,t} − μ_{g,t}) / (σ_{g,t} + ε)          r = step_reward (the turn's info gain)
    D_{i,t} = Σ_{j=t}^{n_i−1} γ^{j−t} n̂_{i,j}               discounted accumulation, n_i = steps
    A_{i,t} = α · D_{i,t} / √(n_i − t) + Â^O_i              √(number of accumulated terms) rescale
    Â^O_i   = (R_i − μ_g) / (σ_g + ε)                        R = episode_reward

γ defaults to 1.0 (IGPO ``train.sh``), α = ``alpha`` (code default 1.0, recipe 0.3). Every step row
is a turn with a turn reward; the reference's final answer turn (which gets Â^O only) has no
separate representation here. The adaptive clip scale c = 1 + 0.3(2σ(n̂) − 1) is a loss-side
quantity and is not produced.

``variant="matchtir"`` (MatchTIR, arXiv 2601.10712, ``Code/verl/trainer/ppo/core_algos.py``):

    G_{i,j}   = Σ_{k≥j} λ^{k−j} r_{i,k}                      λ = gamma, default 0.9 (hard-coded upstream)
    A^turn    = (G_{i,j} − μ_{g,j}) / (σ_{g,j} + ε)
    A^traj_i  = (R_i − μ_g) / (σ_g + ε)
    A_{i,j}   = (A^traj_i + A^turn_{i,j}) / 2

``conventions="verl"`` gives the reference statistics of the chosen variant: A²TGPO population
σ = sqrt(var + 1e-8) + 1e-6 with singletons → 0; MatchTIR unbiased σ + 1e-6 with singletons →
raw (μ=0, σ=1); both take outcome stats over trajectories.

Caveat (verl-project/verl issue #7244): when the policy controls how many turns it takes,
normalising per turn index makes the baseline depend on the trajectory's own stopping turn
(an action-dependent baseline: a hidden −E[R_intermediate] bonus per extra turn). The
estimate is then biased; prefer anchor-state groups (GiGPO/HGPO) when episode lengths vary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .conventions import VERL_A2TGPO, VERL_MATCHTIR, Conventions
from .outcome import episode_advantage
from .registry import register
from .segments import discounted_suffix_sum, group_zscore, pair_codes
from .table import StepTable

VARIANTS = {"a2tgpo": 1.0, "matchtir": 0.9}  # variant -> reference γ


def _reference_conventions(params: Mapping[str, Any]) -> Conventions:
    return VERL_MATCHTIR if params.get("variant") == "matchtir" else VERL_A2TGPO


def _turn_zscore(table: StepTable, x: np.ndarray, conv: Conventions) -> np.ndarray:
    """z-score of x (S,) within (group_id, step_idx) groups."""
    codes, n = pair_codes(table.group, table.step_idx, int(table.step_idx.max(initial=0)) + 1)
    return group_zscore(
        x,
        codes,
        n,
        ddof=conv.ddof_step,
        eps_sigma=conv.eps_sigma,
        eps_var=conv.eps_var,
        singleton=conv.step_singleton,
        scale=True,
    )


@register("turn_group", verl=_reference_conventions)
def turn_group(
    table: StepTable,
    conv: Conventions,
    *,
    variant: str = "a2tgpo",
    gamma: float | None = None,
    alpha: float = 1.0,
) -> np.ndarray:
    """A²TGPO or MatchTIR advantage per step row (S,); gamma=None → the variant's reference γ."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {sorted(VARIANTS)}")
    g = VARIANTS[variant] if gamma is None else float(gamma)
    outcome = episode_advantage(table, conv, scale=True)  # (S,) Â^O / A^traj
    if variant == "matchtir":
        returns = discounted_suffix_sum(table.step_reward, table.ep_start, table.ep_len, g)  # (S,) G
        return 0.5 * (outcome + _turn_zscore(table, returns, conv))
    n_hat = _turn_zscore(table, table.step_reward, conv)  # (S,) n̂
    accumulated = discounted_suffix_sum(n_hat, table.ep_start, table.ep_len, g)  # (S,) D
    n_terms = table.ep_len[table.episode] - table.step_idx  # (S,) n_i − t >= 1
    return float(alpha) * accumulated / np.sqrt(n_terms) + outcome
