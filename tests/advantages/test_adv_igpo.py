"""IGPO (creditline.credit.advantages.igpo): turn rewards from the gold answer's log-probability, by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from adv_tables import invariance_check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.config import from_dict
from creditline.config.checks import ConfigError
from creditline.credit.advantages import AdvantageInputError, compute

# a: 3 turns, ℓ = -2, -1, -0.5, outcome 1; b: 2 turns, ℓ = -2, -2, outcome 0
TOY = pd.DataFrame({
    "group_id": "g", "episode_id": ["a", "a", "a", "b", "b"], "step_idx": [0, 1, 2, 0, 1], "anchor_key": "s",
    "step_reward": 0.0, "episode_reward": [1.0, 1.0, 1.0, 0.0, 0.0], "gold_logprob": [-2.0, -1.0, -0.5, -2.0, -2.0],
})  # fmt: skip


def z(values: list[float]) -> list[float]:
    """IGPO's normalisation: population σ = sqrt(var + 1e-8), ε = 1e-6."""
    mean = sum(values) / len(values)
    sigma = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values) + 1e-8)
    return [(v - mean) / (sigma + 1e-6) for v in values]


def test_separate_log_prob_diff_by_hand():
    # info gains: a 1.0, 0.5; b 0.0 → z; outcomes a 1, b 0 → z; then A_t = r̃_t + A_{t+1} (γ = 1)
    ig_a0, ig_a1, ig_b0 = z([1.0, 0.5, 0.0])
    out_a, out_b = z([1.0, 0.0])
    expected = [ig_a0 + ig_a1 + out_a, ig_a1 + out_a, out_a, ig_b0 + out_b, out_b]
    np.testing.assert_allclose(compute("igpo", TOY), expected, rtol=1e-12)


def test_joint_prob_diff_with_discount_by_hand():
    gains = [math.exp(-1) - math.exp(-2), math.exp(-0.5) - math.exp(-1), 0.0]
    r_a0, r_a1, r_b0, r_a2, r_b1 = z([*gains, 1.0, 0.0])  # one pool: info gains and outcomes together
    g = 0.5
    expected = [r_a0 + g * (r_a1 + g * r_a2), r_a1 + g * r_a2, r_a2, r_b0 + g * r_b1, r_b1]
    adv = compute("igpo", TOY, info_gain="prob_diff", normalize="joint", gamma=g)
    np.testing.assert_allclose(adv, expected, rtol=1e-12)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_row_order_and_group_names_do_not_matter(seed):
    invariance_check("igpo", "gold_logprob", seed)


def test_without_the_gold_column_igpo_is_refused_by_name():
    with pytest.raises(AdvantageInputError, match="column 'gold_logprob': estimator 'igpo' needs"):
        compute("igpo", TOY.drop(columns=["gold_logprob"]))


def test_a_task_without_a_gold_answer_refuses_igpo_by_name():
    with pytest.raises(ConfigError, match='advantages.estimator = "igpo": needs tasks with a gold answer: '
                                          'environment "maze" has no gold_answer()'):  # fmt: skip
        from_dict({"advantages": {"estimator": "igpo", "params": {}}})
    assert from_dict(
        {"advantages": {"estimator": "igpo", "params": {}}, "env": {"name": "lookup", "params": {}}}
    )
