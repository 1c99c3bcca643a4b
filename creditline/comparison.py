"""Estimators compared over seeds: the table with 95 % confidence intervals and the picture.

One result per run, keyed by (task, estimator, seed):

    {"success": [s_0, s_1, ..., s_R],   held-out success of the initial policy (s_0) and after each round
     "seconds": float,                  wall time of the R rounds
     "episodes": int, "tokens": int}    the rollout budget it used (continuations of a branching estimator
                                        included: they are episodes and sampled tokens like any other)

`creditline compare` (a user's experiment, as Dagster runs) and `bench/learning.py` (the learning table)
both report through `table` and `plot`. The interval is Student's t over seeds: mean ± t₀.₉₇₅(n−1)·s/√n.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Mapping, Sequence

THRESHOLD = 0.30
"""A run "learns" when its held-out success first reaches the initial policy's + 0.30."""
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042}  # fmt: skip
"""Student's t quantile 0.975 by degrees of freedom (1.96 beyond 30): the 95 % CI over seeds, or over a
bench's rounds."""

Results = Mapping[tuple[str, str, int], Mapping]


def rounds_to_threshold(success: Sequence[float]) -> int | None:
    """The first round whose held-out success is at least the initial policy's + THRESHOLD (None: never)."""
    return next((r for r, s in enumerate(success) if r > 0 and s >= success[0] + THRESHOLD), None)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t-interval (0 for one value)."""
    if len(values) < 2:
        return (values[0] if values else math.nan), 0.0
    t = T_975.get(len(values) - 1, 1.96)
    return statistics.mean(values), t * statistics.stdev(values) / math.sqrt(len(values))


def table(results: Results) -> str:
    """The Markdown table: one row per task and estimator (final success, mean success over the rounds, rounds
    to +0.30, budget). The mean over rounds 1..R is the area under the learning curve: it tells apart
    estimators that all end at the same success but get there at different speeds."""
    columns = (
        *("task", "estimator", "seeds", "final success (95 % CI)", "mean success, rounds 1–R (95 % CI)"),
        *("rounds to +0.30", "s / run", "episodes", "tokens"),
    )
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for task in dict.fromkeys(k[0] for k in results):
        for estimator in dict.fromkeys(k[1] for k in results if k[0] == task):
            runs = [v for k, v in sorted(results.items()) if k[:2] == (task, estimator)]
            final, ci = mean_ci([r["success"][-1] for r in runs])
            area, area_ci = mean_ci([statistics.mean(r["success"][1:]) for r in runs])
            reached = [n for r in runs if (n := rounds_to_threshold(r["success"])) is not None]
            to_threshold = (
                f"{statistics.median(reached):g} ({len(reached)}/{len(runs)} seeds)"
                if reached
                else f"not reached (0/{len(runs)})"
            )
            seconds = statistics.mean(r["seconds"] for r in runs)
            episodes = statistics.mean(r["episodes"] for r in runs)
            tokens = statistics.mean(r["tokens"] for r in runs)
            lines.append(
                f"| {task} | {estimator} | {len(runs)} | {final:.2f} ± {ci:.2f} | {area:.2f} ± {area_ci:.2f} "
                f"| {to_threshold} | {seconds:.0f} | {episodes:.0f} | {tokens:.0f} |"
            )
    return "\n".join(lines) + "\n"


def line_style(index: int) -> tuple[str, str]:
    """(colour, line style) of the `index`-th estimator: matplotlib's ten cycle colours solid, then the same
    colours dashed, then dotted (distinct for the first 30)."""
    return f"C{index % 10}", ("-", "--", ":")[index // 10 % 3]


def plot(results: Results, colours: Sequence[str] = ()) -> bytes:
    """PNG: held-out success by round, mean and 95 % CI band per estimator, a panel per task. `colours`
    orders the estimators for their colours (one colour and line style per estimator in every panel)."""
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(k[0] for k in results))
    order = list(dict.fromkeys([*colours, *(k[1] for k in results)]))
    columns = min(4, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), dpi=100, squeeze=False)
    for axis in axes.flat[len(tasks) :]:
        axis.set_visible(False)
    for axis, task in zip(axes.flat, tasks, strict=False):
        seeds = {
            e: sum(k[:2] == (task, e) for k in results)
            for e in dict.fromkeys(k[1] for k in results if k[0] == task)
        }
        for estimator in seeds:
            curves = [v["success"] for k, v in sorted(results.items()) if k[:2] == (task, estimator)]
            by_round = [mean_ci([c[r] for c in curves]) for r in range(min(map(len, curves)))]
            mean = [m for m, _ in by_round]
            colour, style = line_style(order.index(estimator))
            axis.plot(range(len(mean)), mean, label=estimator, linewidth=1.4, color=colour, linestyle=style)
            low_band, high_band = [m - h for m, h in by_round], [m + h for m, h in by_round]
            axis.fill_between(range(len(mean)), low_band, high_band, alpha=0.15, color=colour)
        low, high = min(seeds.values()), max(seeds.values())
        axis.set_title(f"{task} ({low}{f'–{high}' if high > low else ''} seeds, 95 % CI)", fontsize=9)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.set_xlabel("round (0 = initial policy)", fontsize=8)
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6, loc="upper left")
    for row in axes:
        row[0].set_ylabel("held-out success", fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
