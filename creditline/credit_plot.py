"""Where a round's credit went: a few episodes, each step's advantage from the round's estimator beside GRPO's.

A person auditing a round wants to see which steps were rewarded, and how that differs from giving every
step its episode's GRPO advantage. `credit_episodes` picks the episodes (deterministically: from the first
groups, by group id, whose samples neither all succeeded nor all failed, the best and the worst sample;
else the first episodes), `credit_picture` draws them:

    one panel per episode: per step, a bar for the estimator's advantage and one for GRPO's
    (Shao et al. 2024, Eq. 3: (R − mean_group R) / std_group R); under the bars, the step's completion
    tokens as a strip of cells coloured by each token's advantage (a multi-token action is a long span),
    and the action text as the step's label.

The picture is Dagster metadata on the `advantages` materialisation and an MLflow artifact of the round.
"""

from __future__ import annotations

import io

import matplotlib
import numpy as np
import pandas as pd

from creditline.config import AdvantageSettings
from creditline.round import step_advantages, with_token_advantages

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GRPO = AdvantageSettings("grpo", {"norm_by_std": True})
"""The trajectory-level baseline every picture compares with."""


def credit_episodes(episodes: pd.DataFrame, steps: pd.DataFrame, count: int = 4) -> list[str]:
    """Up to `count` episode ids worth looking at, the same for the same round (see the module doc)."""
    rewards = episodes.set_index("episode_id")["env_return"]
    groups = steps.drop_duplicates("episode_id")[["episode_id", "group_id"]].sort_values(
        ["group_id", "episode_id"]
    )
    chosen: list[str] = []
    for _, members in groups.groupby("group_id", sort=True):
        returns = rewards.reindex(members["episode_id"]).sort_values(kind="stable")
        if returns.iloc[0] != returns.iloc[-1]:  # a mixed group: the contrast is the credit
            chosen += [returns.index[-1], returns.index[0]]
        if len(chosen) >= count:
            break
    if not chosen:
        chosen = groups["episode_id"].head(count).tolist()
    return [str(e) for e in chosen[:count]]


def credit_table(
    episodes: pd.DataFrame,
    steps: pd.DataFrame,
    scores: pd.DataFrame,
    advantages: pd.DataFrame,
    chosen: list[str],
) -> pd.DataFrame:
    """The chosen episodes' steps with `advantage` (the round's), `grpo` (GRPO's over their whole groups),
    `completion_advantages` (per token), `action` and the episode's `env_return`, in play order."""
    groups = steps.loc[steps["episode_id"].isin(chosen), "group_id"].unique()
    in_groups = steps[steps["group_id"].isin(groups)]
    grpo = step_advantages(in_groups, scores, GRPO)[["episode_id", "step_idx", "advantage"]]
    rows = steps[steps["episode_id"].isin(chosen)][["episode_id", "step_idx", "action", "completion_ids"]]
    rows = rows.merge(episodes[["episode_id", "env_return"]], on="episode_id")
    rows = rows.merge(advantages[["episode_id", "step_idx", "advantage"]], on=["episode_id", "step_idx"])
    rows = rows.merge(grpo.rename(columns={"advantage": "grpo"}), on=["episode_id", "step_idx"])
    order = {e: i for i, e in enumerate(chosen)}
    rows = rows.assign(order=rows["episode_id"].map(order)).sort_values(["order", "step_idx"], kind="stable")
    return with_token_advantages(rows.drop(columns="order").reset_index(drop=True))


def credit_picture(table: pd.DataFrame, estimator: str, title: str) -> bytes:
    """PNG bytes of `credit_table`'s episodes (one panel each, see the module doc)."""
    chosen = list(dict.fromkeys(table["episode_id"]))
    figure, axes = plt.subplots(len(chosen), 1, figsize=(8, 1.7 * max(len(chosen), 1)), dpi=80, squeeze=False)
    scale = max(float(np.abs(table[["advantage", "grpo"]].to_numpy()).max(initial=0.0)), 1e-6)
    colours = plt.get_cmap("coolwarm")
    for axis, episode in zip(axes[:, 0], chosen, strict=True):
        rows = table[table["episode_id"] == episode]
        x = np.arange(len(rows))
        axis.bar(x - 0.2, rows["advantage"], width=0.4, label=estimator, color="tab:blue")
        axis.bar(x + 0.2, rows["grpo"], width=0.4, label="grpo", color="tab:gray", alpha=0.6)
        axis.axhline(0, color="black", linewidth=0.5)
        axis.set_ylim(-1.45 * scale, 1.1 * scale)
        cells, values = [], []  # the per-token strip: each step's 0.8 wide span split among its tokens
        for step, tokens in zip(x, rows["completion_advantages"], strict=True):
            width = 0.8 / max(len(tokens), 1)
            cells += [(step - 0.4 + k * width, width) for k in range(len(tokens))]
            values += list(tokens)
        axis.broken_barh(
            cells, (-1.4 * scale, 0.25 * scale), facecolors=colours(0.5 + 0.5 * np.asarray(values) / scale)
        )
        axis.set_xticks(
            x, [str(a)[:10] for a in rows["action"]], fontsize=6, rotation=45 if len(x) > 8 else 0
        )
        first = rows.iloc[0]
        axis.set_ylabel(f"{str(episode).rsplit(':', 2)[-2]}:{str(episode).rsplit(':', 1)[-1]}\n"
                        f"return {first['env_return']:+.2f}", fontsize=6)  # fmt: skip
        axis.tick_params(axis="y", labelsize=6)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[0, 0].set_title(title, fontsize=9)
    figure.subplots_adjust(
        left=0.09, right=0.99, top=0.93, bottom=0.07, hspace=0.55
    )  # not tight_layout: 3× slower
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
