"""Statistical conventions for group-relative advantages, as explicit knobs, and the presets.

The public reference implementations agree on the equations but not on the statistics
behind them (see /work/shared/reference/advantage-estimators.md §1):

* σ: verl GRPO/RLOO and verl-agent GiGPO use the unbiased std (n−1); HGPO, IGPO and
  A²TGPO use the population std (n).
* singleton groups: verl GRPO and GiGPO's episode level use μ=0, σ=1 (A = raw score);
  GiGPO's step level uses μ = own value (A = 0); prime-rl gives 0.
* episode statistics: verl treats a multi-turn episode as one response, so its group
  statistics take one value per episode; verl-agent's copy computes them over all *step
  rows* (``compute_mean_std_cross_steps=True``), weighting each trajectory by its length.
* ε: added to σ (σ+ε, ε=1e-6) in most places; ``masked_whiten`` uses rsqrt(var+1e-8);
  the A²TGPO copy does both, sqrt(var+1e-8)+1e-6.

Every estimator takes ``conventions=`` a preset name or a :class:`Conventions` instance. A
preset is named after the code it reproduces (:data:`PRESETS`); each estimator registers the
presets it has a reference for (``register(name, references={...})``), ``"creditline"`` (the
project default) is valid everywhere:

* grpo, rloo: ``"verl"`` = :data:`VERL_OUTCOME`, ``"verl-agent"`` = :data:`VERL_AGENT_OUTCOME`
* reinforce_pp_baseline: ``"verl"`` = :data:`VERL_WHITEN`, ``"verl-agent"`` = :data:`VERL_AGENT_WHITEN`
* gigpo: ``"verl-agent"`` = :data:`VERL_AGENT_GIGPO` (GiGPO exists only in verl-agent)
* hgpo: ``"verl-agent"`` = :data:`VERL_AGENT_HGPO` (HGPO exists only in verl-agent)
* turn_group: ``"igpo-fork"`` = :data:`IGPO_FORK_A2TGPO` (with ``variant="a2tgpo"``) and
  ``"matchtir"`` = :data:`MATCHTIR` (with ``variant="matchtir"``): both forks of verl.

On one-step-per-episode tables ``"verl"`` and ``"verl-agent"`` coincide.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

Singleton = Literal["raw", "zero"]
EpisodeStats = Literal["trajectory", "step_rows"]


@dataclass(frozen=True)
class Conventions:
    """How group statistics are taken. σ_eff = sqrt(var + eps_var) + eps_sigma."""

    ddof_episode: int = 0
    """σ degrees of freedom for episode-level (outcome) statistics: 1 = unbiased, 0 = population."""
    ddof_step: int = 0
    """σ degrees of freedom for step-level statistics (anchor groups, HGPO clusters, turn groups)."""
    eps_sigma: float = 1e-6
    """ε added to σ (verl: 1e-6)."""
    eps_var: float = 0.0
    """ε added to the variance inside the sqrt (verl masked_whiten: 1e-8). The token whitening of
    reinforce_pp_baseline (verl masked_whiten) also adds it to its token count N, as verl's
    masked_mean divides by Σmask + 1e-8."""
    episode_singleton: Singleton = "zero"
    """A group with one episode-level sample: "raw" (μ=0, σ=1, A = r/(1+eps_sigma)) or "zero"."""
    step_singleton: Singleton = "zero"
    """A step-level group with one member: "raw" (μ=0, σ=1) or "zero" (μ = own value)."""
    episode_stats: EpisodeStats = "trajectory"
    """Episode-level stats over one sample per trajectory, or over every step row (verl-agent)."""
    drop_zero_levels: bool = False
    """HGPO: drop levels whose advantage is exactly 0 before weighting (verl-agent quirk)."""
    weight_eps: float = 0.0
    """HGPO: ε in the level-weight normaliser w_k = (k+1)^α / (Σ (k'+1)^α + weight_eps)."""

    def __post_init__(self) -> None:
        for name in ("ddof_episode", "ddof_step"):
            if getattr(self, name) not in (0, 1):
                raise ValueError(f"Conventions.{name} must be 0 or 1, got {getattr(self, name)!r}")
        for name in ("episode_singleton", "step_singleton"):
            if getattr(self, name) not in ("raw", "zero"):
                raise ValueError(f"Conventions.{name} must be 'raw' or 'zero', got {getattr(self, name)!r}")
        if self.episode_stats not in ("trajectory", "step_rows"):
            raise ValueError(
                f"Conventions.episode_stats must be 'trajectory' or 'step_rows', got {self.episode_stats!r}"
            )
        for name in ("eps_sigma", "eps_var", "weight_eps"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"Conventions.{name} must be >= 0, got {getattr(self, name)!r}")

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


CREDITLINE = Conventions()
"""The project default (justified in docs/advantages.md): one sample per trajectory,
population σ at both levels, ε=1e-6 on σ, singleton groups → 0, every HGPO level kept."""

PRESETS: dict[str, str] = {
    "creditline": "the project default (docs/advantages.md)",
    "verl": "verl core_algos.py @b178a3c: one value per response (a multi-turn episode is one response)",
    "verl-agent": "verl-agent @20bd331: episode statistics over all step rows (cross-step)",
    "igpo-fork": "A²TGPO's copy in the IGPO fork @745078b (turn_group variant='a2tgpo')",
    "matchtir": "MatchTIR Code/verl/trainer/ppo/core_algos.py (turn_group variant='matchtir')",
}
"""Preset name -> the code it reproduces. Estimators register the subset they have a reference for."""

# verl @b178a3c compute_{grpo,rloo}_outcome_advantage (loop versions): one score per response,
# and a multi-turn episode is one response, so the statistics take one value per episode.
# Unbiased σ (torch.std), ε=1e-6 on σ, singleton group μ=0, σ=1 (A = raw score).
VERL_OUTCOME = Conventions(
    ddof_episode=1,
    ddof_step=1,
    eps_sigma=1e-6,
    eps_var=0.0,
    episode_singleton="raw",
    step_singleton="zero",
    episode_stats="trajectory",
)
# verl masked_whiten: token-weighted, unbiased (Bessel on the token count), rsqrt(var + 1e-8).
VERL_WHITEN = dataclasses.replace(VERL_OUTCOME, eps_sigma=0.0, eps_var=1e-8)
# verl-agent @20bd331's copy: traj_index + compute_mean_std_cross_steps=True, so the group
# statistics run over every step row (a singleton is a group with one step row).
VERL_AGENT_OUTCOME = dataclasses.replace(VERL_OUTCOME, episode_stats="step_rows")
VERL_AGENT_WHITEN = dataclasses.replace(VERL_WHITEN, episode_stats="step_rows")
# verl-agent gigpo/core_gigpo.py: cross-step episode stats, episode singleton raw, step
# (anchor-group) singleton μ = own value → 0, unbiased σ at both levels.
VERL_AGENT_GIGPO = VERL_AGENT_OUTCOME
# verl-agent recipe/hgpo/core_hgpo.py: clusters population σ; base group = GiGPO episode adv.
VERL_AGENT_HGPO = dataclasses.replace(VERL_AGENT_OUTCOME, ddof_step=0, drop_zero_levels=True, weight_eps=1e-6)
# A²TGPO (IGPO fork @745078b copy): population σ = sqrt(var + 1e-8), then + ε;
# count ≤ 1 → σ=1, μ=own.
IGPO_FORK_A2TGPO = Conventions(
    ddof_episode=0,
    ddof_step=0,
    eps_sigma=1e-6,
    eps_var=1e-8,
    episode_singleton="zero",
    step_singleton="zero",
    episode_stats="trajectory",
)
# MatchTIR: unbiased σ at both levels, singleton (g) and (g, j) groups μ=0, σ=1 → raw.
MATCHTIR = Conventions(
    ddof_episode=1,
    ddof_step=1,
    eps_sigma=1e-6,
    eps_var=0.0,
    episode_singleton="raw",
    step_singleton="raw",
    episode_stats="trajectory",
)
