"""prime and spa (creditline.credit.advantages.model_reward): advantages from a step-reward model's values, by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from adv_tables import invariance_check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.credit.advantages import AdvantageInputError, compute

# group g: a (2 steps, v = 0.2, 0.4, R = 1), b (1 step, v = −0.3, R = 0); group h: c alone (v = 0.5, R = 1)
TOY = pd.DataFrame({
    "group_id": ["g", "g", "g", "h"], "episode_id": ["a", "a", "b", "c"], "step_idx": [0, 1, 0, 0],
    "anchor_key": "s", "step_reward": 0.0, "episode_reward": [1.0, 1.0, 0.0, 1.0],
    "model_reward": [0.2, 0.4, -0.3, 0.5],
})  # fmt: skip


def whitened(values: list[float]) -> list[float]:
    """verl's masked_whiten: (x − mean) / sqrt(unbiased var + 1e-8)."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def test_prime_by_hand():
    # g (n = 2): m_a = 0.3, m_b = −0.3, Σm = 0 → r̂ = 2v − 0: a 0.4, 0.8; b −0.6
    #            outcome R − mean of the others: a 1 − 0 = 1, b 0 − 1 = −1
    # h (n = 1): no baseline, r̂ = ô = 0
    # c_p = c_o = 5: rewards a 2, 4 + 5 = 9; b −3 − 5 = −8; c 0 → returns (γ = 1) a 11, 9; b −8; c 0
    np.testing.assert_allclose(compute("prime", TOY), whitened([11.0, 9.0, -8.0, 0.0]), rtol=1e-12)


def test_prime_coefficients_weigh_process_against_outcome():
    # outcome only: a 1, 1; b −1; c 0; process only: a 0.4 + 0.8, 0.8; b −0.6; c 0
    np.testing.assert_allclose(compute("prime", TOY, process_coef=0.0, outcome_coef=1.0),
                               whitened([1.0, 1.0, -1.0, 0.0]), rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(compute("prime", TOY, process_coef=1.0, outcome_coef=0.0),
                               whitened([1.2, 0.8, -0.6, 0.0]), rtol=1e-12)  # fmt: skip


def test_spa_by_hand():
    # γ = 0.5: a 0.2 + 0.5 · 0.4 = 0.4, 0.4; b −0.3; c 0.5
    np.testing.assert_allclose(compute("spa", TOY, gamma=0.5), whitened([0.4, 0.4, -0.3, 0.5]), rtol=1e-12)


def test_spa_default_advantage_is_the_whitened_progress_of_the_step():
    # γ = 0 (the default): A = whitened ĉ = whitened [0.2, 0.4, −0.3, 0.5]; with SPA-RL's γ = 0.99 step a0
    # would take 0.2 + 0.99 · 0.4 = 0.596 (its successor's progress)
    np.testing.assert_allclose(compute("spa", TOY), whitened([0.2, 0.4, -0.3, 0.5]), rtol=1e-12)


def test_spa_does_not_rank_steps_by_the_steps_left():
    # every step makes the same progress ĉ = −0.1 (episode x 3 steps, y 1 step): no step did better than
    # another, so every advantage is 0. A return to go with γ = 0.99 and the round's mean as baseline gives
    # x −0.29701, −0.199, −0.1 and y −0.1 → whitened ≈ −1.30, −0.26, +0.78, +0.78: later steps favoured
    same = pd.DataFrame({"group_id": "g", "episode_id": ["x", "x", "x", "y"], "step_idx": [0, 1, 2, 0],
                         "anchor_key": "s", "step_reward": 0.0, "episode_reward": [-0.3, -0.3, -0.3, -0.1],
                         "model_reward": -0.1})  # fmt: skip
    np.testing.assert_array_equal(compute("spa", same), np.zeros(4))
    np.testing.assert_allclose(compute("spa", same, gamma=0.99),
                               whitened([-0.29701, -0.199, -0.1, -0.1]), rtol=1e-9)  # fmt: skip
    assert compute("spa", same, gamma=0.99)[0] < -1.3


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), estimator=st.sampled_from(["prime", "spa"]))
def test_row_order_and_group_names_do_not_matter(seed, estimator):
    invariance_check(estimator, "model_reward", seed)


@pytest.mark.parametrize("estimator", ["prime", "spa"])
def test_without_model_values_the_estimator_is_refused_by_name(estimator):
    with pytest.raises(AdvantageInputError, match=f"column 'model_reward': estimator '{estimator}' needs"):
        compute(estimator, TOY.drop(columns=["model_reward"]))
    with pytest.raises(
        AdvantageInputError, match="column 'model_reward': not finite \\(example: input row 2\\)"
    ):
        compute(estimator, TOY.assign(model_reward=[0.0, 0.0, np.nan, 0.0]))


@pytest.mark.parametrize(
    "estimator, column", [("prime", "model_reward"), ("spa", "model_reward"), ("igpo", "gold_logprob")]
)
def test_a_value_that_is_no_number_is_refused_naming_the_row(estimator, column):
    frame = TOY.assign(gold_logprob=-1.0).astype({column: object})
    frame.loc[2, column] = "high"
    with pytest.raises(
        AdvantageInputError,
        match=f"column '{column}': must be numbers, got 'high' \\(example: input row 2\\)",
    ):
        compute(estimator, frame)
