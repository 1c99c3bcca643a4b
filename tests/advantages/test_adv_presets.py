"""Each conventions preset reproduces the code it is named after, on a MULTI-STEP table.

Episodes of one group have different step counts, so verl's statistics (one value per episode:
a multi-turn episode is one response) and verl-agent's (every step row, cross-steps) differ.
Expected values are the reference formulas written out by hand (fractions in the comments, numpy
on 2–3 values in the code), never our estimator. ε = 1e-6 on σ unless stated.

Table (γ where used: gigpo/hgpo 0.5, igpo-fork 1, matchtir 0.9):

    group episode step anchor step_reward episode_reward completion_length
    g     a       0    s0     1           1              2
    g     a       1    s1     0           1              1
    g     a       2    s2     1           1              1
    g     b       0    s0     0           0              3
    g     c       0    s0     0           0              1
    g     c       1    s1     1           0              2
    h     d       0    s0     0           1              2
    h     d       1    s1     1           1              2

Group g: episode rewards [1, 0, 0] over 3 episodes, [1, 1, 1, 0, 0, 0] over its 6 step rows.
Group h: one episode (a verl singleton) of two step rows (not a verl-agent singleton).
"""

from math import sqrt

import numpy as np
import pandas as pd
import pytest
from reference_loops import REFERENCE_PRESETS

from creditline.credit.advantages import available, compute, params_hash, presets

EPS = 1e-6
MULTI = pd.DataFrame(
    [
        ("g", "a", 0, "s0", 1.0, 1.0, 2),
        ("g", "a", 1, "s1", 0.0, 1.0, 1),
        ("g", "a", 2, "s2", 1.0, 1.0, 1),
        ("g", "b", 0, "s0", 0.0, 0.0, 3),
        ("g", "c", 0, "s0", 0.0, 0.0, 1),
        ("g", "c", 1, "s1", 1.0, 0.0, 2),
        ("h", "d", 0, "s0", 0.0, 1.0, 2),
        ("h", "d", 1, "s1", 1.0, 1.0, 2),
    ],
    columns=[
        "group_id",
        "episode_id",
        "step_idx",
        "anchor_key",
        "step_reward",
        "episode_reward",
        "completion_length",
    ],
)
ONE_STEP = MULTI[MULTI.step_idx == 0].reset_index(drop=True)  # a0, b0, c0, d0: one step per episode
STEPS = [3, 1, 2, 2]  # rows of episodes a, b, c, d
TOKENS = np.array([4, 3, 3, 4])  # completion tokens of episodes a, b, c, d (= one verl response each)


def rows(a, b, c, d):
    """Per-episode values -> the 8 rows (a a a b c c d d)."""
    return np.repeat([a, b, c, d], STEPS)


def close(got, expected, rtol=1e-9):
    np.testing.assert_allclose(got, np.asarray(expected, dtype=float), rtol=rtol, atol=1e-12)


# --- GRPO / Dr.GRPO ----------------------------------------------------------------------------
def test_grpo_verl_one_value_per_episode():
    # verl: g = [1, 0, 0] (episodes): μ = 1/3, σ_unb = sqrt(((2/3)² + 2(1/3)²)/2) = sqrt(1/3)
    # h has one episode: μ=0, σ=1 -> A = 1/(1+ε), on both of its step rows
    sd = np.std([1.0, 0.0, 0.0], ddof=1)
    assert sd == pytest.approx(sqrt(1 / 3))
    expected = rows((2 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS), 1 / (1 + EPS))
    close(compute("grpo", MULTI, conventions="verl"), expected)
    # Dr.GRPO: r − μ = [2/3, −1/3, −1/3]; singleton μ=0 -> 1
    close(compute("grpo", MULTI, conventions="verl", norm_by_std=False), rows(2 / 3, -1 / 3, -1 / 3, 1.0))


def test_grpo_verl_agent_cross_steps():
    # verl-agent: g = [1, 1, 1, 0, 0, 0] (step rows): μ = 1/2, σ_unb = sqrt(6·(1/4)/5) = sqrt(0.3)
    # h = [1, 1] (two step rows, not a singleton): μ = 1, σ = 0 -> A = 0/(0 + ε) = 0
    sd = np.std([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], ddof=1)
    assert sd == pytest.approx(sqrt(0.3))
    e = 0.5 / (sd + EPS)
    close(compute("grpo", MULTI, conventions="verl-agent"), rows(e, -e, -e, 0.0))
    close(compute("grpo", MULTI, conventions="verl-agent", norm_by_std=False), rows(0.5, -0.5, -0.5, 0.0))


def test_grpo_creditline():
    # one value per episode, σ_pop = sqrt(2/9); singleton -> 0
    sd = sqrt(2 / 9)
    close(
        compute("grpo", MULTI), rows((2 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS), (-1 / 3) / (sd + EPS), 0.0)
    )


# --- RLOO --------------------------------------------------------------------------------------
def test_rloo_verl_loop():
    # verl loop, n = 3 episodes: A_i = r_i − mean_{j≠i} r_j: a = 1 − 0, b = c = 0 − 1/2
    # h has one episode: the loop leaves the raw score 1 (rloo_vectorized would give 0)
    close(compute("rloo", MULTI, conventions="verl"), rows(1.0, -0.5, -0.5, 1.0))


def test_rloo_verl_agent_cross_steps():
    # n = 6 step rows: an a row = 1 − mean(other 5 rows: 1, 1, 0, 0, 0) = 1 − 2/5 = 0.6
    # a b/c row = 0 − mean(1, 1, 1, 0, 0) = −0.6;  h: n = 2 rows, 1 − 1 = 0
    close(compute("rloo", MULTI, conventions="verl-agent"), rows(0.6, -0.6, -0.6, 0.0))


def test_rloo_creditline():
    close(compute("rloo", MULTI), rows(1.0, -0.5, -0.5, 0.0))


# --- REINFORCE++-baseline ---------------------------------------------------------------------
# verl whitens over response tokens: episode a is one response of 2+1+1 = 4 completion tokens, etc.
# masked_whiten over N = 14 tokens: m = Σ x / (N + 1e-8) (masked_mean), v = Σ (x − m)² / (N + 1e-8)
# · N/(N − 1) (masked_var, unbiased), A = (x − m)·rsqrt(v + 1e-8). Below: a per episode, x = a
# repeated over its tokens; the fractions in the comments drop the 1e-8s.
def masked_whiten(a, tokens, n=14):
    m = np.dot(tokens, a) / (n + 1e-8)
    v = np.dot(tokens, (a - m) ** 2) / (n + 1e-8) * n / (n - 1)
    return (a - m) / np.sqrt(v + 1e-8)


def test_reinforce_pp_baseline_verl():
    # a = r − μ_g per episode: [2/3, −1/3, −1/3, 1 (singleton μ=0)]
    # m = (4·2/3 − 3/3 − 3/3 + 4·1)/14 = (14/3)/14 = 1/3; dev = [1/3, −2/3, −2/3, 2/3]
    # Σ tok·dev² = (4·1 + 3·4 + 3·4 + 4·4)/9 = 44/9; v = (44/9)/13 = 44/117
    expected = masked_whiten(np.array([2 / 3, -1 / 3, -1 / 3, 1.0]), TOKENS)
    close(expected, np.array([1 / 3, -2 / 3, -2 / 3, 2 / 3]) / sqrt(44 / 117), rtol=1e-7)  # the fractions
    close(compute("reinforce_pp_baseline", MULTI, conventions="verl"), rows(*expected))


def test_reinforce_pp_baseline_verl_agent():
    # a = r − μ_g over step rows: g μ = 1/2 -> a rows 1/2, b/c rows −1/2; h μ = 1 -> 0
    # m = (4·1/2 − 3/2 − 3/2 + 0)/14 = −1/14; dev = [4/7, −3/7, −3/7, 1/14]
    # Σ tok·dev² = 4·16/49 + 6·9/49 + 4/196 = 119/49; v = (119/49)/13 = 17/91
    expected = masked_whiten(np.array([0.5, -0.5, -0.5, 0.0]), TOKENS)
    close(expected, np.array([4 / 7, -3 / 7, -3 / 7, 1 / 14]) / sqrt(17 / 91), rtol=1e-7)
    close(compute("reinforce_pp_baseline", MULTI, conventions="verl-agent"), rows(*expected))


def test_reinforce_pp_baseline_creditline():
    # a = [2/3, −1/3, −1/3, 0 (singleton)]; m = (8/3 − 1 − 1)/14 = 1/21; dev = [13/21, −8/21, −8/21, −1/21]
    # population: v = (4·169 + 6·64 + 4·1)/441/14 = 76/441; A = dev/(sqrt(v) + ε)
    dev = np.array([13 / 21, -8 / 21, -8 / 21, -1 / 21])
    close(compute("reinforce_pp_baseline", MULTI), rows(*dev / (sqrt(76 / 441) + EPS)))


# --- GiGPO (verl-agent only) -------------------------------------------------------------------
# γ = 0.5 returns: a [1 + 0.5·0.5, 0 + 0.5·1, 1] = [1.25, 0.5, 1], b [0], c [0.5, 1], d [0.5, 1]
# anchor groups: (g, s0) = {a0 1.25, b0 0, c0 0.5}; (g, s1) = {a1 0.5, c1 1}; the rest singletons
S0 = np.array([1.25, 0.0, 0.5])  # μ = 7/12, Σdev² = (64 + 49 + 1)/144 = 19/24
Q_UNB = 0.25 / (sqrt(1 / 8) + EPS)  # (g, s1): dev ±1/4, σ_unb = sqrt(2/16)
Q_POP = 0.25 / (0.25 + EPS)  # σ_pop = 1/4


def test_gigpo_verl_agent():
    # A^E = verl-agent GRPO (cross-step): ±0.5/(sqrt(0.3)+ε), h -> 0
    # A^S (unbiased σ = sqrt(19/48) on (g, s0)), singleton anchor groups -> 0
    e = 0.5 / (np.std([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], ddof=1) + EPS)
    z = (S0 - S0.mean()) / (S0.std(ddof=1) + EPS)
    assert S0.std(ddof=1) == pytest.approx(sqrt(19 / 48))
    expected = [e + z[0], e - Q_UNB, e, -e + z[1], -e + z[2], -e + Q_UNB, 0.0, 0.0]
    close(compute("gigpo", MULTI, gamma=0.5, conventions="verl-agent"), expected)


def test_gigpo_creditline():
    # A^E over episodes, σ_pop = sqrt(2/9), h -> 0; A^S σ_pop = sqrt(19/72)
    ea, eb = (2 / 3) / (sqrt(2 / 9) + EPS), (-1 / 3) / (sqrt(2 / 9) + EPS)
    z = (S0 - S0.mean()) / (S0.std() + EPS)
    expected = [ea + z[0], ea - Q_POP, ea, eb + z[1], eb + z[2], eb + Q_POP, 0.0, 0.0]
    close(compute("gigpo", MULTI, gamma=0.5), expected)


# --- HGPO (verl-agent only), H = 1, base_group=True, α = 1 ---------------------------------------
# k=1 clusters = the anchor groups above (population σ); k=2 windows: (g, (s0, s1)) = {a1, c1}
# (same values as (g, s1)), (g, (s1, s2)) = {a2} and (h, (s0, s1)) = {d1} are size 1: skipped.
# Items per step: base (k=0, weight 1), k=1 (weight 2), k=2 (weight 3).
def test_hgpo_verl_agent():
    # base = cross-step episode advantage: ±e; h's base is exactly 0 and verl-agent drops zero
    # items, so d0, d1 have none -> 0. Weights normalised by Σw + 1e-6.
    e = 0.5 / (np.std([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], ddof=1) + EPS)
    z = (S0 - S0.mean()) / (S0.std() + EPS)
    expected = [
        (e + 2 * z[0]) / (3 + EPS),  # a0: base, k=1
        (e - 2 * Q_POP - 3 * Q_POP) / (6 + EPS),  # a1: base, k=1, k=2
        e / (1 + EPS),  # a2: base only
        (-e + 2 * z[1]) / (3 + EPS),
        (-e + 2 * z[2]) / (3 + EPS),
        (-e + 5 * Q_POP) / (6 + EPS),
        0.0,
        0.0,
    ]
    close(
        compute("hgpo", MULTI, gamma=0.5, history_length=1, base_group=True, conventions="verl-agent"),
        expected,
    )


def test_hgpo_creditline():
    # base over episodes (σ_pop): ea, eb; h's base 0 is kept (weight 1) -> d rows 0/1 = 0; Σw exact
    ea, eb = (2 / 3) / (sqrt(2 / 9) + EPS), (-1 / 3) / (sqrt(2 / 9) + EPS)
    z = (S0 - S0.mean()) / (S0.std() + EPS)
    expected = [
        (ea + 2 * z[0]) / 3,
        (ea - 5 * Q_POP) / 6,
        ea,
        (eb + 2 * z[1]) / 3,
        (eb + 2 * z[2]) / 3,
        (eb + 5 * Q_POP) / 6,
        0.0,
        0.0,
    ]
    close(compute("hgpo", MULTI, gamma=0.5, history_length=1, base_group=True), expected)


# --- turn_group ----------------------------------------------------------------------------------
# turn groups (group, step_idx): (g,0) = {a0, b0, c0}, (g,1) = {a1, c1}; (g,2), (h,0), (h,1) singletons
def test_turn_group_igpo_fork():
    # A²TGPO copy: σ = sqrt(var_pop + 1e-8) + 1e-6; count ≤ 1 -> n̂ = 0; γ = 1, α = 1
    # (g,0) r = [1, 0, 0] -> n̂ = [2/3, −1/3, −1/3]/s0; (g,1) r = [0, 1] -> n̂ = [−1/2, 1/2]/s1
    s0, s1 = sqrt(2 / 9 + 1e-8) + EPS, sqrt(1 / 4 + 1e-8) + EPS
    na0, nb0, nc0, na1, nc1 = (2 / 3) / s0, (-1 / 3) / s0, (-1 / 3) / s0, -0.5 / s1, 0.5 / s1
    # outcome over episodes [1, 0, 0]: same σ rule -> [2/3, −1/3, −1/3]/s0; h (one episode) -> 0
    oa, ob = (2 / 3) / s0, (-1 / 3) / s0
    # A = D/√(n − t) + Â^O, D = suffix sum of n̂ within the episode
    expected = [
        (na0 + na1) / sqrt(3) + oa,
        na1 / sqrt(2) + oa,
        0.0 + oa,
        nb0 + ob,
        (nc0 + nc1) / sqrt(2) + ob,
        nc1 + ob,
        0.0,
        0.0,
    ]
    close(compute("turn_group", MULTI, conventions="igpo-fork"), expected)
    # the creditline default differs only by eps_var = 0 here
    s0, s1 = sqrt(2 / 9) + EPS, 0.5 + EPS
    na0, nb0, nc0, na1, nc1 = (2 / 3) / s0, (-1 / 3) / s0, (-1 / 3) / s0, -0.5 / s1, 0.5 / s1
    oa, ob = (2 / 3) / s0, (-1 / 3) / s0
    close(
        compute("turn_group", MULTI),
        [
            (na0 + na1) / sqrt(3) + oa,
            na1 / sqrt(2) + oa,
            oa,
            nb0 + ob,
            (nc0 + nc1) / sqrt(2) + ob,
            nc1 + ob,
            0,
            0,
        ],
    )


def test_turn_group_matchtir():
    # λ = 0.9: G_a = [1 + 0.9·0.9, 0 + 0.9·1, 1] = [1.81, 0.9, 1], G_b = [0], G_c = [0.9, 1], G_d = [0.9, 1]
    # (g,0) = {1.81, 0, 0.9}; (g,1) = {0.9, 1}: dev ∓0.05, σ_unb = 0.05·√2; singletons μ=0, σ=1 (raw)
    g0 = np.array([1.81, 0.0, 0.9])
    t0 = (g0 - g0.mean()) / (g0.std(ddof=1) + EPS)
    t1 = 0.05 / (0.05 * sqrt(2) + EPS)
    # A^traj over episodes [1, 0, 0], σ_unb = sqrt(1/3); h (one episode): raw 1/(1+ε)
    oa, ob, od = (2 / 3) / (sqrt(1 / 3) + EPS), (-1 / 3) / (sqrt(1 / 3) + EPS), 1 / (1 + EPS)
    expected = [
        (oa + t0[0]) / 2,
        (oa - t1) / 2,
        (oa + 1 / (1 + EPS)) / 2,  # (g,2) = {a2: G = 1} singleton -> raw
        (ob + t0[1]) / 2,
        (ob + t0[2]) / 2,
        (ob + t1) / 2,
        (od + 0.9 / (1 + EPS)) / 2,  # (h,0) = {d0: G = 0.9} singleton -> raw
        (od + 1 / (1 + EPS)) / 2,
    ]
    close(compute("turn_group", MULTI, variant="matchtir", conventions="matchtir"), expected)
    # creditline: σ_pop, singletons 0 (turn groups and h's outcome)
    t0 = (g0 - g0.mean()) / (g0.std() + EPS)
    t1 = 0.05 / (0.05 + EPS)
    oa, ob = (2 / 3) / (sqrt(2 / 9) + EPS), (-1 / 3) / (sqrt(2 / 9) + EPS)
    close(
        compute("turn_group", MULTI, variant="matchtir"),
        [(oa + t0[0]) / 2, (oa - t1) / 2, oa / 2, (ob + t0[1]) / 2, (ob + t0[2]) / 2, (ob + t1) / 2, 0, 0],
    )


# --- verl vs verl-agent ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_verl_and_verl_agent_differ_on_multi_step_and_agree_on_one_step(name):
    verl, agent = (compute(name, MULTI, conventions=p) for p in ("verl", "verl-agent"))
    assert not np.allclose(verl, agent)
    np.testing.assert_array_equal(
        compute(name, ONE_STEP, conventions="verl"), compute(name, ONE_STEP, conventions="verl-agent")
    )


def test_reinforce_pp_baseline_presets_agree_on_one_step():
    np.testing.assert_array_equal(
        compute("reinforce_pp_baseline", ONE_STEP, conventions="verl"),
        compute("reinforce_pp_baseline", ONE_STEP, conventions="verl-agent"),
    )


# --- which presets exist -------------------------------------------------------------------------
PRESETS = {name: ["creditline", *refs] for name, refs in REFERENCE_PRESETS.items()}
PRESETS |= {
    name: ["creditline"] for name in ("igpo", "mc_branch", "spo_tree", "prime", "spa")
}  # no reference code reproduced
assert PRESETS["gigpo"] == ["creditline", "verl-agent"]  # GiGPO and HGPO exist only in verl-agent
assert PRESETS["turn_group"] == ["creditline", "igpo-fork", "matchtir"]  # forks of verl


def test_available_and_presets_list_the_valid_presets():
    assert {name: info["presets"] for name, info in available().items()} == PRESETS
    assert {name: list(presets(name)) for name in PRESETS} == PRESETS


@pytest.mark.parametrize("name", ["gigpo", "hgpo"])
def test_verl_agent_only_estimators_reject_verl(name):
    with pytest.raises(
        ValueError,
        match=rf"estimator '{name}' has no 'verl' reference \(it exists only in verl-agent\); "
        r"valid: creditline, verl-agent \(or a Conventions instance\)",
    ):
        compute(name, MULTI, conventions="verl")


@pytest.mark.parametrize("preset", ["verl", "verl-agent"])
def test_turn_group_has_no_verl_presets(preset):
    with pytest.raises(
        ValueError,
        match=rf"estimator 'turn_group' has no '{preset}' reference; valid: creditline, igpo-fork, matchtir",
    ):
        compute("turn_group", MULTI, conventions=preset)


def test_turn_group_preset_must_match_its_variant():
    with pytest.raises(
        ValueError, match=r"conventions 'matchtir' reproduce turn_group variant='matchtir'.*'igpo-fork'"
    ):
        compute("turn_group", MULTI, conventions="matchtir")
    with pytest.raises(
        ValueError, match=r"conventions 'igpo-fork' reproduce turn_group variant='a2tgpo'.*'matchtir'"
    ):
        compute("turn_group", MULTI, variant="matchtir", conventions="igpo-fork")
    with pytest.raises(ValueError, match="unknown variant 'igpo'"):
        compute("turn_group", MULTI, variant="igpo", conventions="igpo-fork")


def test_other_estimators_reject_turn_group_presets_and_unknown_names():
    with pytest.raises(
        ValueError, match=r"estimator 'grpo' has no 'matchtir' reference; valid: creditline, verl, verl-agent"
    ):
        compute("grpo", MULTI, conventions="matchtir")
    with pytest.raises(
        ValueError, match=r"unknown conventions 'trl' for estimator 'rloo'; valid: creditline, verl"
    ):
        compute("rloo", MULTI, conventions="trl")


def test_params_hash_follows_the_preset_fields():
    # different fields -> different hash
    for name in ("grpo", "rloo", "reinforce_pp_baseline"):
        assert params_hash(name, {"conventions": "verl"}) != params_hash(name, {"conventions": "verl-agent"})
    # pinned: "verl-agent" has exactly the fields the single pre-split "verl" preset had for these
    # estimators, so lineage keys of rounds computed with it are unchanged
    assert params_hash("grpo", {"conventions": "verl-agent"}) == "a4e8a0e0af78435c"
    assert params_hash("gigpo", {"conventions": "verl-agent"}) == "fa8679b7cdeab8b3"
    assert params_hash("hgpo", {"conventions": "verl-agent"}) == "b764183bf7ede9ab"
    assert params_hash("turn_group", {"conventions": "igpo-fork"}) == "c1d472ae2fee35a0"
    assert params_hash("turn_group", {"variant": "matchtir", "conventions": "matchtir"}) == "de95186e055587ec"
