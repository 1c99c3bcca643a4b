"""Where a round's credit went: a few episodes, each step's advantage from the round's estimator beside
GRPO's.

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

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import join_on_step, step_advantages, with_token_advantages

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
    presets = ["preset_advantage", "preset_completion_advantages"]
    in_groups = steps[steps["group_id"].isin(groups)].drop(columns=presets, errors="ignore")
    grpo = step_advantages(in_groups, scores, GRPO)  # GRPO's own, not an imported round's preset advantages
    kept = [c for c in ["preset_completion_advantages"] if c in steps]  # the source's per-token credit
    rows = steps[steps["episode_id"].isin(chosen)][
        ["episode_id", "step_idx", "action", "completion_ids", *kept]
    ]
    rows = rows.merge(episodes[["episode_id", "env_return"]], on="episode_id")
    rows = join_on_step(rows, advantages, ["advantage"], "the round's advantages")
    rows = join_on_step(rows, grpo.rename(columns={"advantage": "grpo"}), ["grpo"], "GRPO's advantages")
    order = {e: i for i, e in enumerate(chosen)}
    rows = rows.assign(order=rows["episode_id"].map(order)).sort_values(["order", "step_idx"], kind="stable")
    return with_token_advantages(rows.drop(columns="order").reset_index(drop=True))


def credit_picture(table: pd.DataFrame, estimator: str, title: str) -> bytes:
    """PNG bytes of `credit_table`'s episodes (one panel each, see the module doc).

    Drawn with Pillow, not matplotlib: it is drawn every round, and a matplotlib figure of four panels cost
    ~0.4 s of the round's ~6 s here (ticks and patches); this costs milliseconds.
    """
    chosen = list(dict.fromkeys(table["episode_id"]))
    steps = max((int((table["episode_id"] == e).sum()) for e in chosen), default=1)
    cell, left, top, panel = 40, 96, 30, 120  # px: one step's width, label margin, title band, panel height
    image = Image.new("RGB", (left + cell * steps + 10, top + panel * len(chosen) + 6), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=10)
    draw.text((6, 6), title, fill="black", font=font)
    draw.rectangle((left + cell * steps - 150, 8, left + cell * steps - 142, 16), fill=BLUE)
    draw.text((left + cell * steps - 138, 6), estimator, fill="black", font=font)
    draw.rectangle((left + cell * steps - 70, 8, left + cell * steps - 62, 16), fill=GREY)
    draw.text((left + cell * steps - 58, 6), "grpo", fill="black", font=font)
    scale = max(float(np.abs(table[["advantage", "grpo"]].to_numpy()).max(initial=0.0)), 1e-6)
    for n, episode in enumerate(chosen):
        rows = table[table["episode_id"] == episode]
        y0 = top + n * panel
        zero, height = y0 + 42, 36  # the bars' zero line and their height at |advantage| = scale
        short = ":".join(str(episode).rsplit(":", 2)[-2:])
        draw.text((4, y0 + 20), short, fill="black", font=font)
        draw.text((4, y0 + 34), f"return {rows['env_return'].iloc[0]:+.2f}", fill="black", font=font)
        draw.line((left, zero, left + cell * steps, zero), fill="black")
        for k, row in enumerate(rows.itertuples()):
            x = left + k * cell
            for offset, value, colour in ((4, row.advantage, BLUE), (20, row.grpo, GREY)):
                bar = round(height * value / scale)
                draw.rectangle(
                    (x + offset, min(zero, zero - bar), x + offset + 14, max(zero, zero - bar)), fill=colour
                )
            tokens = list(row.completion_advantages)  # the per-token strip: each token's share of the step
            for t, value in enumerate(tokens):
                x0 = x + 2 + (cell - 4) * t / len(tokens)
                x1 = x + 2 + (cell - 4) * (t + 1) / len(tokens)
                draw.rectangle(
                    (x0, zero + height + 4, max(x0, x1 - 1), zero + height + 14),
                    fill=_diverging(value / scale),
                )
            draw.text((x + 2, zero + height + 17), str(row.action)[:7], fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


BLUE, GREY = (31, 119, 180), (170, 170, 170)


def _diverging(value: float) -> tuple[int, int, int]:
    """Blue (−1) through white (0) to red (+1); `value` clipped to [−1, 1]."""
    v = min(max(value, -1.0), 1.0)
    far = (59, 76, 192) if v < 0 else (180, 4, 38)
    red, green, blue = (round(255 + (c - 255) * abs(v)) for c in far)
    return red, green, blue
