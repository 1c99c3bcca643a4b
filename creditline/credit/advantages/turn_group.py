"""Turn-index groups: A²TGPO and MatchTIR (per-(group, turn index) normalisation).

Both normalise a per-turn quantity within the (group_id, step_idx) group — all episodes of a
prompt group at the same turn index — and add an outcome (episode) advantage.

``variant="a2tgpo"`` (A²TGPO; reference: its code copy in the IGPO fork @745078b, notes in
advantage-estimators.md):

    n̂_{i,t} = (r_{i,t} − μ_{g,t}) / (σ_{g,t} + ε)          r = step_reward (the turn's info gain)
    D_{i,t} = Σ_{j=t}^{n_i−1} γ^{j−t} n̂_{i,j}               discounted accumulation, n_i = steps
    A_{i,t} = α · D_{i,t} / √(n_i − t) + Â^O_i              √(number of accumulated terms) rescale
    Â^O_i   = (R_i − μ_g) / (σ_g + ε)                        R = episode_reward

γ defaults to 1.0 (IGPO ``train.sh``), α = ``alpha`` (code default 1.0, recipe 0.3). Every step row
is a turn with a turn reward; the reference's final answer turn (which gets Â^O only) has no
separate representation here. The adaptive clip scale c = 1 + 0.3(2σ(n̂) − 1) is a loss-side
quantity and is not produced.

``variant="matchtir"`` (MatchTIR, arXiv 2601.10712, ``Code/verl/trainer/ppo/core_algos.py``):

    G_{i,j}   = Σ_{k≥j} λ^{k−j} r_{i,k}                  λ = gamma, default 0.9 (hard-coded upstream)
    A^turn    = (G_{i,j} − μ_{g,j}) / (σ_{g,j} + ε)
    A^traj_i  = (R_i − μ_g) / (σ_g + ε)
    A_{i,j}   = (A^traj_i + A^turn_{i,j}) / 2

Presets: both references are forks of verl, not verl itself, so turn_group has no ``"verl"`` /
``"verl-agent"`` preset; each reference preset is named after its code and reproduces one variant:

* ``conventions="igpo-fork"`` (with ``variant="a2tgpo"``): A²TGPO's copy in the IGPO fork
  @745078b: population σ = sqrt(var + 1e-8) + 1e-6, count ≤ 1 → n̂ = 0, outcome likewise.
* ``conventions="matchtir"`` (with ``variant="matchtir"``): MatchTIR's code: unbiased σ + 1e-6,
  singleton (g) and (g, j) groups μ=0, σ=1 (raw value).

Both take outcome stats over trajectories. A preset paired with the other variant raises
ValueError (it would reproduce neither code); pass a :class:`Conventions` to mix them.

Caveat (verl-project/verl issue #7244): when the policy controls how many turns it takes,
normalising per turn index makes the baseline depend on the trajectory's own stopping turn
(an action-dependent baseline: a hidden −E[R_intermediate] bonus per extra turn). The
estimate is then biased; prefer anchor-state groups (GiGPO/HGPO) when episode lengths vary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .conventions import IGPO_FORK_A2TGPO, MATCHTIR, Conventions
from .outcome import episode_advantage
from .registry import register
from .segments import discounted_suffix_sum, group_zscore, pair_codes
from .table import StepTable

VARIANTS = {"a2tgpo": 1.0, "matchtir": 0.9}  # variant -> reference γ
REFERENCES = {"a2tgpo": ("igpo-fork", IGPO_FORK_A2TGPO), "matchtir": ("matchtir", MATCHTIR)}
"""variant -> (the preset that reproduces its code, its conventions)."""


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {sorted(VARIANTS)}")


def _reference(own_variant: str) -> Callable[[Mapping[str, Any]], Conventions]:
    """The conventions of the preset reproducing ``own_variant``'s code; another variant raises."""
    preset, conv = REFERENCES[own_variant]

    def conventions(params: Mapping[str, Any]) -> Conventions:
        variant = params["variant"]
        check_variant(variant)
        if variant != own_variant:
            raise ValueError(
                f"conventions {preset!r} reproduce turn_group variant={own_variant!r}; with "
                f"variant={variant!r} use conventions={REFERENCES[variant][0]!r} (or a Conventions instance)"
            )
        return conv

    return conventions


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


@register("turn_group", references={preset: _reference(v) for v, (preset, _) in REFERENCES.items()})
def turn_group(
    table: StepTable,
    conv: Conventions,
    *,
    variant: str = "a2tgpo",
    gamma: float | None = None,
    alpha: float = 1.0,
) -> np.ndarray:
    """A²TGPO or MatchTIR advantage per step row (S,); gamma=None → the variant's reference γ."""
    check_variant(variant)
    g = VARIANTS[variant] if gamma is None else float(gamma)
    outcome = episode_advantage(table, conv, scale=True)  # (S,) Â^O / A^traj
    if variant == "matchtir":
        returns = discounted_suffix_sum(table.step_reward, table.ep_start, table.ep_len, g)  # (S,) G
        return 0.5 * (outcome + _turn_zscore(table, returns, conv))
    n_hat = _turn_zscore(table, table.step_reward, conv)  # (S,) n̂
    accumulated = discounted_suffix_sum(n_hat, table.ep_start, table.ep_len, g)  # (S,) D
    n_terms = table.ep_len[table.episode] - table.step_idx  # (S,) n_i − t >= 1
    return float(alpha) * accumulated / np.sqrt(n_terms) + outcome
