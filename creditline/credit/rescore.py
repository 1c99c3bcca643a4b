"""How a re-scored round differs from the round as trained: rewards, advantage ranks, sign flips.

When a rubric changes, old rounds are re-scored from their stored rollouts (nothing is regenerated)
and their advantages recomputed with the experiment's estimator. Three numbers say how much the
training signal would have changed:

- reward correlation: Pearson r between the two rubrics' episode totals;
- advantage rank correlation: Spearman ρ between the two step-advantage columns (row by row);
- sign-flip share: among step rows where either advantage is non-zero, the share whose sign
  differs, i.e. actions that one rubric reinforces and the other suppresses.

A correlation is None when either side is constant (it is undefined there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from creditline.credit.round_advantages import STEP_KEY, join_on_step


@dataclass(frozen=True)
class RescoreComparison:
    reward_correlation: float | None
    advantage_rank_correlation: float | None
    sign_flip_share: float
    steps: int


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def compare_rescoring(
    trained_scores: pd.DataFrame,
    rescored_scores: pd.DataFrame,
    trained_advantages: pd.DataFrame,
    rescored_advantages: pd.DataFrame,
) -> RescoreComparison:
    """Compare two scorings of the same steps; tables are joined on (episode_id, step_idx), not row order."""
    episodes = trained_scores.drop_duplicates("episode_id").merge(
        rescored_scores.drop_duplicates("episode_id"), on="episode_id", suffixes=("_trained", "_rescored")
    )
    rescored = rescored_advantages.rename(columns={"advantage": "advantage_rescored"})
    advantages = join_on_step(
        trained_advantages[[*STEP_KEY, "advantage"]].rename(columns={"advantage": "advantage_trained"}),
        rescored,
        ["advantage_rescored"],
        "re-scored advantages",
    )
    trained, rescored = (
        advantages["advantage_trained"].to_numpy(),
        advantages["advantage_rescored"].to_numpy(),
    )
    ranks = (pd.Series(trained).rank().to_numpy(), pd.Series(rescored).rank().to_numpy())
    either = (trained != 0) | (rescored != 0)
    flips = np.sign(trained[either]) != np.sign(rescored[either])
    return RescoreComparison(
        reward_correlation=_pearson(
            episodes["episode_reward_trained"].to_numpy(), episodes["episode_reward_rescored"].to_numpy()
        ),
        advantage_rank_correlation=_pearson(*ranks),
        sign_flip_share=float(flips.mean()) if either.any() else 0.0,
        steps=len(advantages),
    )
