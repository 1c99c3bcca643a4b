"""Small PNG plots for people: success and return by round (matplotlib, no display needed)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def success_by_round(rounds: list[int], success: list[float], mean_return: list[float], title: str) -> bytes:
    """A two-line chart of held-out success rate and mean return per round; returns PNG bytes."""
    figure, axis = plt.subplots(figsize=(5, 3), dpi=100)
    axis.plot(rounds, success, marker="o", label="success rate")
    axis.plot(rounds, mean_return, marker=".", linestyle="--", label="mean return")
    axis.set_xlabel("round (0 = initial policy)")
    axis.set_ylim(min(-0.1, min(mean_return, default=0) - 0.05), 1.05)
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="upper left")
    figure.subplots_adjust(
        left=0.11, right=0.97, top=0.9, bottom=0.15
    )  # fixed margins: tight_layout doubles the cost
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
