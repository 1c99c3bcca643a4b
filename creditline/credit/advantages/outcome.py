"""Outcome (episode-reward) estimators: GRPO / Dr.GRPO, RLOO, REINFORCE++-baseline.

Every step row of an episode gets the episode's advantage. With r_i the episode reward and g
its group (group_id):

* GRPO (Shao et al. 2024, arXiv 2402.03300, §4.1.2):  A_i = (r_i − μ_g) / (σ_g + ε)
* Dr.GRPO (Liu et al. 2025, arXiv 2503.20783):        A_i = r_i − μ_g       (``norm_by_std=False``)
* RLOO (Ahmadian et al. 2024, arXiv 2402.14740):       A_i = r_i − mean_{j≠i} r_j
                                                           = n/(n−1)·(r_i − μ_g)
* REINFORCE++-baseline (Hu 2025, arXiv 2501.03262):    a_i = r_i − μ_g, then batch whitening over
  tokens: A = (a − m)/sqrt(v + 1e-8), m, v = token-weighted mean and (Bessel-corrected) variance
  (verl ``masked_whiten``, including ``masked_mean``'s Σmask + 1e-8; see the function).
  Each row counts ``completion_length`` tokens; without that column, one token per row.

μ_g, σ_g are taken over one sample per trajectory (``episode_stats="trajectory"``) or over all
step rows of the group (``"step_rows"``). The reference presets:

* ``"verl"``: verl ``core_algos.py`` @b178a3c, the loop versions ``compute_grpo_outcome_advantage``,
  ``compute_rloo_outcome_advantage``, ``compute_reinforce_plus_plus_baseline_outcome_advantage``.
  In verl a multi-turn episode is one response, so the statistics take one value per episode;
  unbiased σ, ε = 1e-6 on σ; a group with one episode keeps the raw score (GRPO: μ=0, σ=1;
  RLOO: A = r, the *loop* version; verl's ``rloo_vectorized`` gives 0 there, and
  ``grpo_vectorized`` clamps the variance at ε: neither is reproduced). For
  REINFORCE++-baseline, verl whitens over the response tokens of the batch; an episode's
  response tokens are the completion tokens of its steps (observation tokens are masked), so
  weighting each step row by its ``completion_length`` is the same whitening.
* ``"verl-agent"``: verl-agent @20bd331's copy of the same three functions (``traj_index``,
  ``compute_mean_std_cross_steps=True``): every step row is a response, so μ_g, σ_g and the
  group size n run over step rows (an episode of k steps counts k times, and a singleton is a
  group with a single step row).

On one-step-per-episode tables the two presets give the same numbers.
"""

from __future__ import annotations

import numpy as np

from .conventions import VERL_AGENT_OUTCOME, VERL_AGENT_WHITEN, VERL_OUTCOME, VERL_WHITEN, Conventions
from .registry import register
from .segments import group_zscore, leave_one_out, weighted_whiten
from .table import StepTable


def episode_values(table: StepTable, conv: Conventions) -> tuple[np.ndarray, np.ndarray, bool]:
    """(values, group codes, per_episode): the samples of the episode-level statistics.

    per_episode=True: values/codes are (E,), one per trajectory; else (S,), one per step row.
    """
    if conv.episode_stats == "trajectory":
        return table.ep_reward, table.ep_group, True
    assert table.episode_reward is not None
    return table.episode_reward, table.group, False


def to_rows(table: StepTable, values: np.ndarray, per_episode: bool) -> np.ndarray:
    """Broadcast (E,) episode values to (S,) rows (no-op for row values)."""
    return values[table.episode] if per_episode else values


def episode_advantage(table: StepTable, conv: Conventions, *, scale: bool) -> np.ndarray:
    """A^E (S,): z-score (scale) or centred (not scale) episode reward within its group."""
    x, codes, per_episode = episode_values(table, conv)
    a = group_zscore(
        x,
        codes,
        table.n_groups,
        ddof=conv.ddof_episode,
        eps_sigma=conv.eps_sigma,
        eps_var=conv.eps_var,
        singleton=conv.episode_singleton,
        scale=scale,
    )
    return to_rows(table, a, per_episode)


@register("grpo", references={"verl": VERL_OUTCOME, "verl-agent": VERL_AGENT_OUTCOME})
def grpo(table: StepTable, conv: Conventions, *, norm_by_std: bool = True) -> np.ndarray:
    """GRPO: A = (r − μ_g)/(σ_g + ε); Dr.GRPO with ``norm_by_std=False``: A = r − μ_g. (S,)"""
    return episode_advantage(table, conv, scale=bool(norm_by_std))


@register("rloo", references={"verl": VERL_OUTCOME, "verl-agent": VERL_AGENT_OUTCOME})
def rloo(table: StepTable, conv: Conventions) -> np.ndarray:
    """RLOO: A = n/(n−1)·(r − μ_g); singleton group → r ("raw", verl's loop) or 0. (S,)"""
    x, codes, per_episode = episode_values(table, conv)
    a = leave_one_out(x, codes, table.n_groups, singleton=conv.episode_singleton)
    return to_rows(table, a, per_episode)


@register("reinforce_pp_baseline", references={"verl": VERL_WHITEN, "verl-agent": VERL_AGENT_WHITEN})
def reinforce_pp_baseline(table: StepTable, conv: Conventions) -> np.ndarray:
    """REINFORCE++-baseline: a = r − μ_g, then token-weighted batch whitening. (S,)

    verl ``masked_whiten`` with N tokens: m = Σ_tok a / (N + eps_var) (``masked_mean`` divides by
    Σmask + 1e-8), v = Σ_tok (a − m)² / (N + eps_var) · N / (N − ddof_episode) (``masked_var``
    with Bessel), A = (a − m) / (sqrt(v + eps_var) + eps_sigma). With the creditline eps_var = 0
    these are the plain token mean and variance.
    """
    centred = episode_advantage(table, conv, scale=False)  # (S,)
    tokens = (
        np.ones(table.n_rows)
        if table.completion_length is None
        else table.completion_length.astype(np.float64)
    )  # (S,)
    return weighted_whiten(
        centred,
        tokens,
        eps_var=conv.eps_var,
        ddof=conv.ddof_episode,
        eps_count=conv.eps_var,
        eps_sigma=conv.eps_sigma,
    )
