"""Advantages from a learned step-reward model's values v_t (column ``model_reward``; `creditline.reward_model`
trains the model each round and writes the column).

``prime`` — PRIME (Cui et al. 2025, arXiv 2502.01456), as verl's ``recipe/prime`` @246cac4
``compute_rloo_advantage_return`` computes it. v_t is the implicit process reward of step t
(β Σ log π_φ/π_ref over its tokens, `creditline.implicit_prm`), R the episode reward; per group of n episodes:

    process   r̂_t = v_t · n/(n−1) − (1/(n−1)) Σ_j m_j        m_j = mean_t v_{j,t}  (verl's masked_rloo)
    outcome   ô   = R · n/(n−1) − (1/(n−1)) Σ_j R_j = R − mean_{j≠i} R_j       on the episode's last step
    return    G_t = Σ_{k≥t} (c_p · r̂_k + c_o · ô · [k = T−1])                 γ = 1
    advantage A_t = (G_t − mean G) / sqrt(var G + 1e-8)                        over the whole round, unbiased var

with c_p = ``process_coef`` and c_o = ``outcome_coef`` (reward_dpo_coef, reward_gt_coef = 5, 5). A group of one
episode has no leave-one-out baseline: its r̂ and ô are 0. Differences: PRIME's unit is the token (r̂ per token,
m_j the mean over tokens, the whitening over tokens); here it is the step, a step's tokens summed into v_t, so
for a single-step episode A is PRIME's advantage at the first token, up to the whitening's weights.

``spa`` — SPA-RL (Wang et al. 2025, arXiv 2505.20732). v_t = ĉ_t is the progress estimator's contribution of
step t (`creditline.progress_model`), the step's dense reward (SPA-RL Eq. 8 without its grounding term:
our environments do not report whether an action took effect):

    return    G_t = Σ_{k≥t} γ^{k−t} ĉ_k
    advantage A_t = (G_t − mean G) / sqrt(var G + 1e-8)                        over the whole round

SPA-RL trains these rewards with PPO (a value head, GAE γ = 0.99, λ = 0.95, whitened advantages); creditline
has no critic, so the return is used with the round's mean as its baseline (GAE with V ≡ 0 is this return with
γλ in place of γ). Note: SPA-RL's released WebShop script replaces the predicted ĉ_t with one constant per
trajectory (its reward minus the leave-one-out mean) before RL (``prm/rl_data_org.py``); this follows the paper.
"""

from __future__ import annotations

import numpy as np

from .conventions import Conventions
from .registry import register
from .segments import discounted_suffix_sum
from .table import AdvantageInputError, StepTable

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
    episodes = np.repeat(np.arange(len(table.ep_len)), table.ep_len)  # (S,) episode code of each row
    ep_group = table.ep_group  # (E,)
    n = np.bincount(ep_group, minlength=table.n_groups).astype(np.float64)  # (G,) episodes per group
    ep_mean = np.bincount(episodes, weights=value) / table.ep_len  # (E,) m_j
    group_sum = np.bincount(ep_group, weights=ep_mean, minlength=table.n_groups)  # (G,) Σ_j m_j
    outcome = table.ep_reward  # (E,)
    outcome_sum = np.bincount(ep_group, weights=outcome, minlength=table.n_groups)  # (G,)
    has_baseline = n > 1  # (G,)
    scale = np.divide(n, n - 1.0, out=np.zeros_like(n), where=has_baseline)  # n/(n−1), 0 for a singleton
    share = np.divide(1.0, n - 1.0, out=np.zeros_like(n), where=has_baseline)  # 1/(n−1)
    row_group = table.group
    process = value * scale[row_group] - group_sum[row_group] * share[row_group]  # (S,) r̂
    ep_outcome = outcome * scale[ep_group] - outcome_sum[ep_group] * share[ep_group]  # (E,) ô
    reward = process_coef * process
    reward[table.ep_start + table.ep_len - 1] += outcome_coef * ep_outcome
    return whiten(discounted_suffix_sum(reward, table.ep_start, table.ep_len, 1.0))


@register("spa", columns=(MODEL_REWARD_COLUMN,))
def spa(table: StepTable, conv: Conventions, *, gamma: float = 0.99) -> np.ndarray:
    """A_t: the whitened discounted return of the progress contributions ĉ (S,)."""
    del conv
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    value = model_values(table, "spa")
    return whiten(discounted_suffix_sum(value, table.ep_start, table.ep_len, float(gamma)))


def model_values(table: StepTable, estimator: str) -> np.ndarray:
    """The sorted `model_reward` column (S,), checked present and finite."""
    if MODEL_REWARD_COLUMN not in table.extra:
        raise AdvantageInputError(
            f"column {MODEL_REWARD_COLUMN!r}: estimator {estimator!r} needs the step-reward model's value of every "
            "step, which the round's reward_model stage writes"
        )
    value = np.asarray(table.extra[MODEL_REWARD_COLUMN], dtype=np.float64)
    if not np.isfinite(value).all():
        r = int(np.flatnonzero(~np.isfinite(value))[0])
        raise AdvantageInputError(
            f"column {MODEL_REWARD_COLUMN!r}: not finite (example: input row {int(table.order[r])})"
        )
    return value


def whiten(x: np.ndarray) -> np.ndarray:
    """(x − mean) / sqrt(var + 1e-8) over all rows, var unbiased (verl's masked_whiten); one row → 0."""
    if len(x) < 2:
        return np.zeros_like(x)
    return (x - x.mean()) / np.sqrt(x.var(ddof=1) + WHITEN_EPS)
