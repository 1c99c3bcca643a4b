"""Sample filters: which of a round's episodes the policy update learns from.

``prof`` — PROF's process-consistency filter (Ye et al. 2025, "Beyond Correctness: Harmonizing Process and
Outcome Rewards through RL Training", arXiv 2509.03403; amazon-science/PROF-GRPO
``compute_verify_step_level_score`` and ``filter_trajectories``). Per episode i with outcome R_i ∈ {0, 1}
(success) and process values v_{i,k} (here the rubric's step rewards, the round's process signal), with μ the
mean process value over every step row of the round:

    s_i = mean_k 2 · (v_{i,k} − μ) · (2 R_i − 1)      consistency: a correct episode whose steps were
                                                      rewarded, or a failed one whose steps were not

Then in every group of n episodes, n_remove = min(remove, n) are dropped, split so the kept correct and
incorrect counts are as balanced as possible, the least consistent of each class first. With P correct and
N incorrect episodes, δ = P − N:

    n_pos = min(n_remove, round((δ + n_remove) / 2))      (Python's round, as PROF's code)
    n_pos > 0:  drop the min(n_pos, P) correct episodes of lowest s, then the rest of n_remove from the
                incorrect ones of lowest s
    else:       drop the min(n_remove, N) incorrect episodes of lowest s

Ties in s are broken by episode_id, so the result never depends on row order. PROF computes GRPO on the kept
samples (the advantages' group statistics exclude the dropped ones) and its recipe drops 4 of 8.
Differences: PROF's process values are a PRM's step scores in [0, 1]; its length penalty (−10 outside 2..30
steps) and the truncation of the kept list to a multiple of the GPU count are not reproduced.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def consistency(scores: pd.DataFrame, success: pd.Series) -> pd.Series:
    """s_i per episode (indexed by episode_id) from the step rewards of `scores` and `success` (by
    episode_id)."""
    centred = scores["step_reward"].to_numpy(dtype=np.float64) - float(scores["step_reward"].mean())
    sign = 2.0 * success.reindex(scores["episode_id"]).to_numpy(dtype=np.float64) - 1.0
    return pd.Series(2.0 * centred * sign).groupby(scores["episode_id"].to_numpy()).mean()


def prof_keep(scores: pd.DataFrame, episodes: pd.DataFrame, remove: int) -> pd.Series:
    """True for the episodes PROF keeps (a bool Series indexed by episode_id, every episode of `scores`)."""
    success = episodes.set_index("episode_id")["success"].astype(bool)
    score = consistency(scores, success)
    groups = scores.drop_duplicates("episode_id").set_index("episode_id")["group_id"]
    table = pd.DataFrame({"group": groups, "s": score, "correct": success.reindex(groups.index)})
    table = table.rename_axis("episode_id").reset_index()
    keep = pd.Series(True, index=table["episode_id"].to_numpy())
    for _, group in table.groupby("group", sort=False):
        ranked = group.sort_values(["s", "episode_id"], kind="stable")
        correct, incorrect = ranked[ranked["correct"]], ranked[~ranked["correct"]]
        n_remove = min(remove, len(group))
        n_pos = min(n_remove, round((len(correct) - len(incorrect) + n_remove) / 2))
        if n_pos > 0:
            dropped_pos = correct["episode_id"].iloc[: min(n_pos, len(correct))]
            dropped = [*dropped_pos, *incorrect["episode_id"].iloc[: n_remove - len(dropped_pos)]]
        else:
            dropped = list(incorrect["episode_id"].iloc[: min(n_remove, len(incorrect))])
        keep[dropped] = False
    return keep
