"""The comparison's statistics and table, by hand (the learning table and `creditline compare` share them)."""

import pytest

from creditline.comparison import line_style, mean_ci, plot, rounds_to_threshold, table


def test_the_table_and_its_statistics_by_hand():
    assert rounds_to_threshold([0.1, 0.2, 0.39, 0.41, 0.0]) == 3  # first round ≥ initial + 0.30
    assert rounds_to_threshold([0.5, 0.7, 0.79]) is None
    mean, half = mean_ci([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4) and half == pytest.approx(4.303 * 0.2 / 3**0.5)  # t(2) · s / √n
    assert mean_ci([0.7]) == (0.7, 0.0)
    # twelve rounds of a bench: 0.0, 0.1, ..., 1.1, s = √(Σ(x − 0.55)² / 11) = √0.13 = 0.3606, t(11) = 2.201
    mean, half = mean_ci([i / 10 for i in range(12)])
    assert mean == pytest.approx(0.55) and half == pytest.approx(2.201 * 0.13**0.5 / 12**0.5)
    results = {
        ("t", "a", s): {"success": [0.0, v / 2, v], "seconds": 10.0, "episodes": 8 + 2 * s, "tokens": 16}
        for s, v in enumerate([0.2, 0.6])
    }
    (row,) = table(results).splitlines()[2:]
    # final: 0.40 ± 12.706 · 0.283 / √2; over rounds 1–2: seeds 0.15 and 0.45, 0.30 ± 12.706 · 0.212 / √2;
    # seed 1 reaches 0.30 at round 1, seed 0 never; a branching run's extra episodes count in the mean budget
    assert row == "| t | a | 2 | 0.40 ± 2.54 | 0.30 ± 1.91 | 1 (1/2 seeds) | 10 | 9 | 16 |"
    assert plot(results).startswith(b"\x89PNG")


def test_every_registered_estimator_gets_its_own_line_in_the_plot():
    """Fourteen estimators (and their variants) on one panel: no two share a colour and a line style (tab10
    alone gives gigpo and the eleventh estimator the same blue)."""
    from creditline.credit.advantages.registry import available

    styles = [line_style(i) for i in range(len(available()) + 3)]  # and the learning bench's three variants
    assert len(set(styles)) == len(styles) > 10
    assert line_style(0) == ("C0", "-") and line_style(10) == ("C0", "--")
