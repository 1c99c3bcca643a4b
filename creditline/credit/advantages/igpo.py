"""IGPO — Information-Gain Policy Optimization (Wang et al. 2025, arXiv 2510.14967, ICLR 2026).

Each turn of an episode is rewarded by how much it raised the policy's belief in the task's gold answer.
With ℓ_t the policy's mean log-probability of the gold answer's tokens teacher-forced after step t's prompt
(column ``gold_logprob``, computed in the rollouts stage by `creditline.credit.gold_answer`; the prompt of
step t holds the results of turns < t), per step row t of an episode of T steps:

    info gain     r_t = p(ℓ_{t+1}) − p(ℓ_t)      t < T − 1;  p = exp ("prob_diff", the paper's
                                                 π(a|q, o≤t)) or the identity ("log_prob_diff",
                                                 the recipe's)
    outcome       r_{T−1} = R                    the episode reward (the paper's answer F1)
    normalise     r̃ = (r − μ) / (σ + ε)          per group: "separate" z-scores the info gains and the
                                                 outcomes apart, "joint" pools them; population σ
                                                 = sqrt(var + 1e-8), ε = 1e-6, a singleton → 0
    accumulate    A_t = r̃_t + γ · A_{t+1}        (turn-level discounted sum, γ = 1 in the recipe)

This is the code of the IGPO fork at 745078b (``compute_grpo_outcome_advantage`` with
``info_gain_norm_mode`` and ``gamma``; its recipe: ``log_prob_diff``, ``separate``, γ = 1), as the shared
reference notes read it. Differences: the fork leaves info gains that are exactly 0 out of the statistics
(its mask is ``reward != 0``); here every turn counts. IGPO's released code (GuoqingWang1/IGPO) instead
subtracts the group mean of γ = 1 returns at each token position, without σ.
"""

from __future__ import annotations

import numpy as np

from .conventions import Conventions
from .registry import register
from .segments import discounted_suffix_sum, group_zscore
from .table import StepTable, extra_column

INFO_GAINS = ("prob_diff", "log_prob_diff")
NORMALISATIONS = ("separate", "joint")
GOLD_COLUMN = "gold_logprob"


@register("igpo", columns=(GOLD_COLUMN,))
def igpo(
    table: StepTable,
    conv: Conventions,
    *,
    info_gain: str = "log_prob_diff",
    normalize: str = "separate",
    gamma: float = 1.0,
) -> np.ndarray:
    """A_t = r̃_t + γ A_{t+1} of the normalised info-gain and outcome turn rewards (S,)."""
    del conv  # IGPO's own statistics: population σ, ε = 1e-6, var + 1e-8
    if info_gain not in INFO_GAINS:
        raise ValueError(f"unknown info_gain {info_gain!r}; valid: {list(INFO_GAINS)}")
    if normalize not in NORMALISATIONS:
        raise ValueError(f"unknown normalize {normalize!r}; valid: {list(NORMALISATIONS)}")
    gold = extra_column(
        table,
        GOLD_COLUMN,
        "igpo",
        "the policy's log-probability of the task's gold answer at "
        "every step, which the rollouts stage records for an environment with gold_answer()",
    )
    belief = np.exp(gold) if info_gain == "prob_diff" else gold
    last = np.zeros(table.n_rows, dtype=bool)
    last[table.ep_start + table.ep_len - 1] = True  # (S,) an episode's final turn
    gain = np.zeros(table.n_rows)
    gain[~last] = belief[1:][~last[:-1]] - belief[:-1][~last[:-1]]  # row t+1 is the same episode's next step
    assert table.episode_reward is not None
    reward = np.where(last, table.episode_reward, gain)  # (S,)
    # groups: (group, kind) for "separate", the group for "joint"
    codes = table.group * 2 + last if normalize == "separate" else table.group.copy()
    normalised = group_zscore(
        reward, codes, table.n_groups * 2, ddof=0, eps_sigma=1e-6, eps_var=1e-8, singleton="zero"
    )
    return discounted_suffix_sum(normalised, table.ep_start, table.ep_len, float(gamma))
