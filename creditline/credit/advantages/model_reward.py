"""Advantages from a learned step-reward model's values v_t (column ``model_reward``;
`creditline.credit.reward_model` trains the model each round and writes the column).

``prime`` — PRIME (Cui et al. 2025, arXiv 2502.01456), as verl's ``recipe/prime`` @246cac4
``compute_rloo_advantage_return`` computes it. v_t is the implicit process reward of step t
(β Σ log π_φ/π_ref over its tokens, `creditline.credit.implicit_prm`), R the episode reward; per group of n
episodes:

    process   r̂_t = v_t · n/(n−1) − (1/(n−1)) Σ_j m_j             m_j = mean_t v_{j,t}
                                                                  (verl's masked_rloo)
    outcome   ô   = R · n/(n−1) − (1/(n−1)) Σ_j R_j               on the episode's last step
                  = R − mean_{j≠i} R_j
    return    G_t = Σ_{k≥t} (c_p · r̂_k + c_o · ô · [k = T−1])     γ = 1
    advantage A_t = (G_t − mean G) / sqrt(var G + 1e-8)           over the whole round, unbiased var

with c_p = ``process_coef`` and c_o = ``outcome_coef`` (reward_dpo_coef, reward_gt_coef = 5, 5). A group of
one episode has no leave-one-out baseline: its r̂ and ô are 0. Differences: PRIME's unit is the token (r̂
per token, m_j the mean over tokens, the whitening over tokens); here it is the step, a step's tokens summed
into v_t, so for a single-step episode A is PRIME's advantage at the first token, up to the whitening's
weights.

``spa`` — SPA-RL (Wang et al. 2025, arXiv 2505.20732). v_t = ĉ_t is the progress estimator's contribution
of step t (`creditline.credit.progress_model`), the step's dense reward (SPA-RL Eq. 8 without its grounding
term: our environments do not report whether an action took effect):

    return    G_t = Σ_{k≥t} γ^{k−t} ĉ_k                                   γ = 0 by default: G_t = ĉ_t
    advantage A_t = (G_t − mean G) / sqrt(var G + 1e-8)                        over the whole round

SPA-RL trains these rewards with PPO (a value head, GAE γ = 0.99, λ = 0.95, whitened advantages). creditline
has no critic, so the round's mean is the only baseline, and that makes γ > 0 wrong here: the return to go
of an episode of T steps is about (T − t) · mean ĉ plus the progress of the steps after t, so its advantage
ranks steps by how many steps are left (on the shaped maze mean ĉ ≈ −0.07, and every episode's first step
got A ≈ −1.2 whatever it did), which PPO's V(s_t) would have subtracted. ĉ_t alone is what SPA attributes to
step t ("its incremental progress"), so the default advantage is the whitened ĉ_t; γ > 0 stays available.
(docs/advantages.md, "SPA and PROF: what was wrong".) Note: SPA-RL's released WebShop script replaces the
predicted ĉ_t with one constant per trajectory (its reward minus the leave-one-out mean) before RL
(``prm/rl_data_org.py``); this follows the paper.
"""

from __future__ import annotations

import numpy as np

from .conventions import Conventions
from .registry import register
from .segments import discounted_suffix_sum, leave_one_out, safe_divide, weighted_whiten
from .table import StepTable, extra_column

MODEL_REWARD_COLUMN = "model_reward"
"""The step rows' column of model values v_t, written by the reward-model stage."""
WHITEN_EPS = 1e-8


@register("prime", columns=(MODEL_REWARD_COLUMN,))
def prime(
    table: StepTable, conv: Conventions, *, process_coef: float = 5.0, outcome_coef: float = 5.0
) -> np.ndarray:
    """A_t: the whitened return of leave-one-out implicit process rewards and outcome (S,)."""
    del conv  # PRIME's own statistics
    value = model_values(table, "prime")  # (S,) sorted rows
    assert table.episode_reward is not None
    n = np.bincount(table.ep_group, minlength=table.n_groups).astype(np.float64)  # (G,) episodes per group
    ep_mean = np.bincount(table.episode, weights=value) / table.ep_len  # (E,) m_j
    group_mean = safe_divide(
        np.bincount(table.ep_group, weights=ep_mean, minlength=table.n_groups), n
    )  # (G,)
    # v·n/(n−1) − Σ_j m_j/(n−1) = n/(n−1) · (v − mean_j m_j); a singleton group (n = 1) gets 0
    process = safe_divide(n, n - 1.0)[table.group] * (value - group_mean[table.group])  # (S,) r̂
    outcome = leave_one_out(table.ep_reward, table.ep_group, table.n_groups, singleton="zero")  # (E,) ô
    reward = process_coef * process
    reward[table.ep_start + table.ep_len - 1] += outcome_coef * outcome
    return whiten(discounted_suffix_sum(reward, table.ep_start, table.ep_len, 1.0))


@register("spa", columns=(MODEL_REWARD_COLUMN,))
def spa(table: StepTable, conv: Conventions, *, gamma: float = 0.0) -> np.ndarray:
    """A_t: the whitened discounted return of the progress contributions ĉ (S,); γ = 0: the whitened ĉ_t."""
    del conv
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    value = model_values(table, "spa")
    return whiten(discounted_suffix_sum(value, table.ep_start, table.ep_len, float(gamma)))


def model_values(table: StepTable, estimator: str) -> np.ndarray:
    """The sorted `model_reward` column (S,), checked present, numeric and finite."""
    return extra_column(
        table,
        MODEL_REWARD_COLUMN,
        estimator,
        "the step-reward model's value of every step, which the round's reward_model stage writes",
    )


def whiten(x: np.ndarray) -> np.ndarray:
    """(x − mean) / sqrt(var + 1e-8) over all step rows, var unbiased (verl's masked_whiten, rows for
    tokens)."""
    return weighted_whiten(x, np.ones(len(x)), eps_var=WHITEN_EPS)
