"""Hand-computed cases for every estimator, under "creditline" and its reference presets.

The outcome cases here have one step per episode, where "verl" and "verl-agent" agree (both are
asserted); test_adv_presets.py has the multi-step table on which they differ.

Arithmetic is written out in the comments; expected values are the same arithmetic in Python.
ε = 1e-6 on σ unless stated. "pop" = population σ (n), "unb" = unbiased σ (n−1).
"""

from math import sqrt

import numpy as np
import pandas as pd
import pytest

from creditline.credit.advantages import compute

EPS = 1e-6


def close(got, expected):
    np.testing.assert_allclose(got, np.asarray(expected, dtype=float), rtol=1e-9, atol=1e-12)


def table(rows):
    """rows: (group, episode, step_idx, anchor, step_reward, episode_reward)."""
    return pd.DataFrame(
        rows, columns=["group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward"]
    )


# --- outcome estimators: one step per episode -----------------------------------------------
# g1 rewards [1, 0, 0]; g2 is a singleton with reward 1.
OUTCOME = table(
    [
        ("g1", "a", 0, "s", 0.0, 1.0),
        ("g1", "b", 0, "s", 0.0, 0.0),
        ("g1", "c", 0, "s", 0.0, 0.0),
        ("g2", "d", 0, "s", 0.0, 1.0),
    ]
)
SD_UNB = sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # = sqrt(1/3) = 0.57735
SD_POP = sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 3)  # = sqrt(2/9) = 0.471405


@pytest.mark.parametrize("preset", ["verl", "verl-agent"])
def test_grpo_reference_one_step(preset):
    # μ = 1/3, σ_unb = 0.57735 -> A = (2/3)/(0.57735+ε) = 1.1547, (−1/3)/(0.57735+ε) = −0.57735
    # singleton: μ=0, σ=1 -> A = 1/(1+ε) (verl keeps the raw score)
    close(
        compute("grpo", OUTCOME, conventions=preset),
        [(2 / 3) / (SD_UNB + EPS), (-1 / 3) / (SD_UNB + EPS), (-1 / 3) / (SD_UNB + EPS), 1 / (1 + EPS)],
    )


def test_grpo_creditline():
    # σ_pop = 0.471405 -> A = 1.41421, −0.70711, −0.70711; singleton -> 0
    close(
        compute("grpo", OUTCOME),
        [(2 / 3) / (SD_POP + EPS), (-1 / 3) / (SD_POP + EPS), (-1 / 3) / (SD_POP + EPS), 0.0],
    )


def test_dr_grpo_all_presets():
    # A = r − μ = [2/3, −1/3, −1/3]; singleton: raw 1 (verl, verl-agent) or 0 (creditline)
    for preset in ("verl", "verl-agent"):
        close(compute("grpo", OUTCOME, norm_by_std=False, conventions=preset), [2 / 3, -1 / 3, -1 / 3, 1.0])
    close(compute("grpo", OUTCOME, norm_by_std=False), [2 / 3, -1 / 3, -1 / 3, 0.0])


def test_rloo_all_presets():
    # A_i = r_i − mean_{j≠i} r_j: 1 − 0, 0 − 1/2, 0 − 1/2; singleton: verl loop raw 1, creditline 0
    for preset in ("verl", "verl-agent"):
        close(compute("rloo", OUTCOME, conventions=preset), [1.0, -0.5, -0.5, 1.0])
    close(compute("rloo", OUTCOME), [1.0, -0.5, -0.5, 0.0])


@pytest.mark.parametrize("preset", ["verl", "verl-agent"])
def test_reinforce_pp_baseline_reference_one_step(preset):
    # a = r − μ_g = [2/3, −1/3, −1/3, 1 (singleton μ=0)]; one token per row (no completion_length)
    # batch mean m = (2/3 − 2/3 + 1)/4 = 1/4; deviations [5/12, −7/12, −7/12, 3/4]
    # Σdev² = 25/144 + 2·49/144 + 81/144 = 204/144; var_unb = (204/144)/3 = 0.47222
    # A = dev / sqrt(var + 1e-8) = [0.60634, −0.84887, −0.84887, 1.09141]
    # exactly, verl's masked_mean divides by N + 1e-8: m = 1/(4 + 1e-8), var = Σdev²/(4 + 1e-8)·4/3
    a = np.array([2 / 3, -1 / 3, -1 / 3, 1.0])
    m = 1 / (4 + 1e-8)
    var = ((a - m) ** 2).sum() / (4 + 1e-8) * 4 / 3
    assert var == pytest.approx(204 / 144 / 3, rel=1e-7)
    close(compute("reinforce_pp_baseline", OUTCOME, conventions=preset), (a - m) / sqrt(var + 1e-8))


@pytest.mark.parametrize("preset", ["verl", "verl-agent"])
def test_reinforce_pp_baseline_token_weighted(preset):
    # completion lengths [2, 1, 1, 4] tokens; a = [2/3, −1/3, −1/3, 1]
    # token mean m = (2·2/3 − 1/3 − 1/3 + 4·1)/8 = (14/3)/8 = 7/12  (exactly: (14/3)/(8 + 1e-8))
    # Σ tok·dev² = 2(1/12)² + 2(11/12)² + 4(5/12)² = (2 + 242 + 100)/144 = 344/144; var = (344/144)/7
    df = OUTCOME.assign(completion_length=[2, 1, 1, 4])
    a, tok = np.array([2 / 3, -1 / 3, -1 / 3, 1.0]), np.array([2, 1, 1, 4])
    m = (14 / 3) / (8 + 1e-8)
    var = (tok * (a - m) ** 2).sum() / (8 + 1e-8) * 8 / 7
    assert var == pytest.approx(344 / 144 / 7, rel=1e-7)
    close(compute("reinforce_pp_baseline", df, conventions=preset), (a - m) / sqrt(var + 1e-8))


def test_reinforce_pp_baseline_creditline():
    # a = [2/3, −1/3, −1/3, 0 (singleton)]; m = 0; Σdev² = 6/9; var_pop = (2/3)/4 = 1/6
    # A = a / (sqrt(1/6) + ε) = [1.63299, −0.81650, −0.81650, 0]
    a = np.array([2 / 3, -1 / 3, -1 / 3, 0.0])
    close(compute("reinforce_pp_baseline", OUTCOME), a / (sqrt(1 / 6) + EPS))


# --- GiGPO ---------------------------------------------------------------------------------
# group g: episode A anchors [s0, s1], step rewards [0, 1], R=1
#          episode B anchors [s0, s2], step rewards [0, 0], R=0
# group h: episode C (singleton group) anchor [s0], step reward 1, R=1
# γ = 0.5: returns A = [0 + 0.5·1, 1] = [0.5, 1], B = [0, 0], C = [1]
# anchor groups: (g, s0) = {A0: 0.5, B0: 0}; (g, s1) = {A1}, (g, s2) = {B1}, (h, s0) = {C0}: singletons
GIGPO = table(
    [
        ("g", "A", 0, "s0", 0.0, 1.0),
        ("g", "A", 1, "s1", 1.0, 1.0),
        ("g", "B", 0, "s0", 0.0, 0.0),
        ("g", "B", 1, "s2", 0.0, 0.0),
        ("h", "C", 0, "s0", 1.0, 1.0),
    ]
)


def test_gigpo_verl_agent():
    # episode stats over step rows [1, 1, 0, 0]: μ=0.5, σ_unb = sqrt(4·0.25/3) = 0.57735 -> ±0.86602
    # (g, s0): [0.5, 0]: μ=0.25, σ_unb = sqrt(2·0.0625/1) = 0.35355 -> ±0.70711; step singletons -> 0
    # group h: one row -> episode singleton raw 1/(1+ε); step singleton 0
    ae = 0.5 / (sqrt(1 / 3) + EPS)
    a_s = 0.25 / (sqrt(0.125) + EPS)
    close(
        compute("gigpo", GIGPO, gamma=0.5, conventions="verl-agent"),
        [ae + a_s, ae, -ae - a_s, -ae, 1 / (1 + EPS)],
    )


def test_gigpo_creditline():
    # episode stats over trajectories [1, 0]: μ=0.5, σ_pop=0.5 -> ±0.5/(0.5+ε) ≈ ±1
    # (g, s0): μ=0.25, σ_pop=0.25 -> ±0.25/(0.25+ε) ≈ ±1; singletons -> 0
    ae, a_s = 0.5 / (0.5 + EPS), 0.25 / (0.25 + EPS)
    close(compute("gigpo", GIGPO, gamma=0.5), [ae + a_s, ae, -ae - a_s, -ae, 0.0])


def test_gigpo_mean_norm_and_weight():
    # mean_norm: A^E = R − μ = ±0.5; A^S on (g, s0) = ±0.25; ω = 2 -> [1, 0.5, −1, −0.5]
    # the singleton group h: verl-agent raw 1, creditline 0
    close(
        compute("gigpo", GIGPO, gamma=0.5, mode="mean_norm", step_advantage_w=2.0, conventions="verl-agent"),
        [1.0, 0.5, -1.0, -0.5, 1.0],
    )
    close(
        compute("gigpo", GIGPO, gamma=0.5, mode="mean_norm", step_advantage_w=2.0),
        [1.0, 0.5, -1.0, -0.5, 0.0],
    )


# --- HGPO ----------------------------------------------------------------------------------
# one group; γ = 0.5; H = 1 (levels k = 1, 2; weights (k+1)^1 = 2, 3)
#   P anchors [s0, s1] rewards [0, 1] -> returns [0.5, 1]
#   Q anchors [s0, s1] rewards [0, 1] -> returns [0.5, 1]
#   R anchors [s2, s1] rewards [0, 0] -> returns [0, 0]
# k=1: s0 = {P0 .5, Q0 .5} constant -> a = 0; s2 = {R0} size 1, skipped
#      s1 = {P1 1, Q1 1, R1 0}: μ = 2/3, σ_pop = sqrt(2/9) -> P1, Q1 = (1/3)/σ = 0.70711, R1 = −1.41421
# k=2: (s0, s1) = {P1 1, Q1 1} constant -> a = 0; (s2, s1) = {R1} skipped
HGPO = table(
    [
        ("g", "P", 0, "s0", 0.0, 1.0),
        ("g", "P", 1, "s1", 1.0, 1.0),
        ("g", "Q", 0, "s0", 0.0, 1.0),
        ("g", "Q", 1, "s1", 1.0, 1.0),
        ("g", "R", 0, "s2", 0.0, 0.0),
        ("g", "R", 1, "s1", 0.0, 0.0),
    ]
)
S1 = sqrt(2 / 9) + EPS


def test_hgpo_verl_agent_drops_zero_levels():
    # verl-agent keeps only nonzero levels: P1 = [(1, 0.70711)] -> 2/(2+ε)·0.70711 (the k=2 zero dropped)
    # P0, Q0: only a zero item -> no items -> 0; R1 = 2/(2+ε)·(−1.41421); R0: no items -> 0
    w = 2 / (2 + EPS)
    close(
        compute("hgpo", HGPO, gamma=0.5, history_length=1, conventions="verl-agent"),
        [0.0, w * (1 / 3) / S1, 0.0, w * (1 / 3) / S1, 0.0, w * (-2 / 3) / S1],
    )


def test_hgpo_creditline_keeps_zero_levels():
    # P1 = (2·0.70711 + 3·0)/(2 + 3) = 0.28284; R1 = −1.41421 (its k=2 cluster is size 1)
    close(
        compute("hgpo", HGPO, gamma=0.5, history_length=1),
        [0.0, 2 * (1 / 3) / S1 / 5, 0.0, 2 * (1 / 3) / S1 / 5, 0.0, (-2 / 3) / S1],
    )


def test_hgpo_base_group_and_alpha0():
    # base_group adds (0, A^E) with weight 1; creditline A^E over trajectories [1, 1, 0]:
    #   μ = 2/3, σ_pop = sqrt(2/9) -> P, Q: 0.70711, R: −1.41421 (= the same numbers as s1)
    # α = 0: all weights 1 -> plain mean of the kept items
    #   P0 = (A^E + 0)/2, P1 = (A^E + a1 + 0)/3, R0 = A^E/1, R1 = (A^E + a1)/2
    ae_p, ae_r = (1 / 3) / S1, (-2 / 3) / S1
    got = compute("hgpo", HGPO, gamma=0.5, history_length=1, base_group=True, length_weight_alpha=0.0)
    close(got, [ae_p / 2, 2 * ae_p / 3, ae_p / 2, 2 * ae_p / 3, ae_r, ae_r])


def test_hgpo_h0_is_gigpo_step_level():
    # H = 0 -> one level (k=1): A = a_1 on clusters of size >= 2, which is GiGPO's A^S
    got = compute("hgpo", HGPO, gamma=0.5, history_length=0)
    close(got, [0.0, (1 / 3) / S1, 0.0, (1 / 3) / S1, 0.0, (-2 / 3) / S1])


# --- turn-index groups ---------------------------------------------------------------------
# one group: A step rewards [1, 0], R=1; B step rewards [0, 1, 1], R=0
# turn groups: t0 = {A0 1, B0 0}, t1 = {A1 0, B1 1}, t2 = {B2 1} (singleton)
TURNS = table(
    [
        ("g", "A", 0, "x", 1.0, 1.0),
        ("g", "A", 1, "x", 0.0, 1.0),
        ("g", "B", 0, "x", 0.0, 0.0),
        ("g", "B", 1, "x", 1.0, 0.0),
        ("g", "B", 2, "x", 1.0, 0.0),
    ]
)


def test_a2tgpo_creditline():
    # n̂: t0 = [+z, −z], t1 = [−z, +z], t2 = [0] with z = 0.5/(0.5+ε); γ = 1
    # D: A0 = z − z = 0, A1 = −z; B0 = −z + z + 0 = 0, B1 = z, B2 = 0
    # /√(n−t): A [√2, 1], B [√3, √2, 1]; outcome Â^O = ±z (μ=0.5, σ_pop=0.5)
    z = 0.5 / (0.5 + EPS)
    close(compute("turn_group", TURNS), [0 + z, -z + z, 0 - z, z / sqrt(2) - z, 0 - z])
    # α = 0.3 only scales the turn part
    close(compute("turn_group", TURNS, alpha=0.3), [z, -0.3 * z + z, -z, 0.3 * z / sqrt(2) - z, -z])


def test_a2tgpo_igpo_fork():
    # reference σ = sqrt(var_pop + 1e-8) + 1e-6, count ≤ 1 -> n̂ = 0
    z = 0.5 / (sqrt(0.25 + 1e-8) + EPS)
    close(compute("turn_group", TURNS, conventions="igpo-fork"), [z, 0.0, -z, z / sqrt(2) - z, -z])


def test_matchtir_both_presets():
    # λ = 0.9: G_A = [1 + 0.9·0, 0] = [1, 0]; G_B = [0 + 0.9·1 + 0.81·1, 1 + 0.9·1, 1] = [1.71, 1.9, 1]
    # t0 = {1, 1.71}: μ = 1.355, dev ∓0.355; t1 = {0, 1.9}: μ = 0.95, dev ∓0.95; t2 = {1} singleton
    # creditline (pop σ = |dev|): A^turn ≈ ∓1, singleton 0; A^traj = ±0.5/(0.5+ε)
    z = 0.5 / (0.5 + EPS)
    t0, t1 = 0.355 / (0.355 + EPS), 0.95 / (0.95 + EPS)
    close(
        compute("turn_group", TURNS, variant="matchtir"),
        [(z - t0) / 2, (z - t1) / 2, (-z + t0) / 2, (-z + t1) / 2, (-z + 0) / 2],
    )
    # matchtir (its code): unbiased σ = |dev|·√2; singleton (g, t2): μ=0, σ=1 -> 1/(1+ε); A^traj with σ_unb = √0.5
    zu = 0.5 / (sqrt(0.5) + EPS)
    u0, u1 = 0.355 / (0.355 * sqrt(2) + EPS), 0.95 / (0.95 * sqrt(2) + EPS)
    close(
        compute("turn_group", TURNS, variant="matchtir", conventions="matchtir"),
        [(zu - u0) / 2, (zu - u1) / 2, (-zu + u0) / 2, (-zu + u1) / 2, (-zu + 1 / (1 + EPS)) / 2],
    )


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_pp_baseline", "gigpo", "hgpo", "turn_group"])
def test_row_order_does_not_matter(name):
    shuffled = GIGPO.iloc[[3, 0, 4, 2, 1]].reset_index(drop=True)
    base = compute(name, GIGPO)
    np.testing.assert_array_equal(compute(name, shuffled), base[[3, 0, 4, 2, 1]])
