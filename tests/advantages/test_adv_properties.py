"""hypothesis invariants: zero group mean, shift invariance, constant group → 0, row order."""

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_loops import reference_presets

from creditline.credit.advantages import compute

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
REWARD = st.one_of(st.sampled_from([0.0, 1.0, 0.5, -1.0]), st.floats(-10, 10, allow_nan=False, width=32))


@st.composite
def step_tables(draw, max_groups=3, max_group_size=5, max_steps=4):
    rows = []
    for g in range(draw(st.integers(1, max_groups))):
        for e in range(draw(st.integers(1, max_group_size))):
            ep_reward = draw(REWARD)
            for t in range(draw(st.integers(1, max_steps))):
                rows.append((f"g{g}", f"g{g}e{e}", t, f"s{draw(st.integers(0, 2))}", draw(REWARD), ep_reward))
    return pd.DataFrame(
        rows, columns=["group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward"]
    )


def per_episode(df, values):
    """(episode's group, episode's value) for the first row of each episode."""
    first = ~df.episode_id.duplicated()
    return df.group_id[first].to_numpy(), values[first.to_numpy()]


@SETTINGS
@given(step_tables())
def test_outcome_estimators_have_zero_group_mean(df):
    # creditline: one sample per trajectory -> Σ_episodes A = 0 in every group
    for name, kw in [("grpo", {}), ("grpo", {"norm_by_std": False}), ("rloo", {})]:
        groups, a = per_episode(df, compute(name, df, **kw))
        sums = pd.Series(a).groupby(groups).sum()
        scale = 1 + pd.Series(np.abs(a)).groupby(groups).sum()
        assert (np.abs(sums) <= 1e-9 * scale).all(), (name, sums)
    # reinforce_pp_baseline whitens over the batch: Σ_rows A = 0
    assert abs(compute("reinforce_pp_baseline", df).sum()) < 1e-8 * len(df)


@SETTINGS
@given(step_tables())
def test_gigpo_step_part_has_zero_anchor_group_mean(df):
    episode_part = compute("grpo", df)  # A^E with the same conventions
    step_part = compute("gigpo", df, gamma=0.9) - episode_part
    sums = pd.Series(step_part).groupby([df.group_id, df.anchor_key]).sum()
    assert np.allclose(sums, 0.0, atol=1e-8)
    np.testing.assert_allclose(compute("gigpo", df, step_advantage_w=0.0), episode_part, atol=1e-12)


@SETTINGS
@given(step_tables(), st.floats(-100, 100), st.integers(0, 2))
def test_shift_invariance(df, c, which):
    # add c to every reward of one group; γ = 0 so step returns shift by c too
    group = f"g{which}"
    sel = df.group_id == group
    shifted = df.assign(episode_reward=df.episode_reward + c * sel, step_reward=df.step_reward + c * sel)
    cases = [
        ("grpo", {}),
        ("grpo", {"norm_by_std": False}),
        ("rloo", {}),
        ("reinforce_pp_baseline", {}),
        ("gigpo", {"gamma": 0.0}),
        ("gigpo", {"gamma": 0.0, "mode": "mean_norm"}),
        ("hgpo", {"gamma": 0.0, "base_group": True}),
        ("turn_group", {}),
        ("turn_group", {"variant": "matchtir", "gamma": 0.0}),
    ]
    for name, kw in cases:
        a, b = compute(name, df, **kw), compute(name, shifted, **kw)
        # a shift of size |c| costs ~|c|·1e-16/σ of precision in (r − μ); compare with that slack
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * (1 + abs(c)) / _min_spread(df), err_msg=name)


def _min_spread(df):
    spreads = [np.ptp(df.episode_reward), np.ptp(df.step_reward)]
    return max(min([s for s in spreads if s > 0], default=1.0), 1e-3)


@SETTINGS
@given(step_tables(), st.floats(-5, 5, width=32))
def test_constant_group_gives_zero(df, value):
    const = df.assign(episode_reward=value, step_reward=value)
    cases = [
        ("grpo", {}),
        ("rloo", {}),
        ("reinforce_pp_baseline", {}),
        ("gigpo", {"gamma": 0.0}),
        ("hgpo", {"gamma": 0.0, "base_group": True}),
        ("turn_group", {}),
        ("turn_group", {"variant": "matchtir", "gamma": 0.0}),
    ]
    for name, kw in cases:
        out = compute(name, const, **kw)
        np.testing.assert_allclose(out, 0.0, atol=1e-9, err_msg=f"{name} creditline")
    # verl / verl-agent keep the raw score of singleton groups (and MatchTIR of singleton turn
    # groups), so the reference presets give 0 only where every group has >= 2 episodes
    n_episodes = const.groupby("group_id").episode_id.transform("nunique")
    paired = const[n_episodes >= 2]
    if len(paired):
        for name, kw in cases[:-1]:
            for preset in reference_presets(name, kw):
                out = compute(name, paired, conventions=preset, **kw)
                np.testing.assert_allclose(out, 0.0, atol=1e-9, err_msg=f"{name} {preset}")


@SETTINGS
@given(step_tables(), st.randoms(use_true_random=False))
def test_row_shuffling_changes_nothing(df, random):
    perm = list(range(len(df)))
    random.shuffle(perm)
    shuffled = df.iloc[perm].reset_index(drop=True)
    for name, kw in [
        ("grpo", {}),
        ("rloo", {}),
        ("reinforce_pp_baseline", {}),
        ("gigpo", {}),
        ("hgpo", {"base_group": True}),
        ("turn_group", {}),
        ("turn_group", {"variant": "matchtir"}),
    ]:
        for conventions in ("creditline", *reference_presets(name, kw)):
            a = compute(name, df, conventions=conventions, **kw)
            b = compute(name, shuffled, conventions=conventions, **kw)
            np.testing.assert_array_equal(b, a[perm], err_msg=f"{name} {conventions}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outcomes=st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=8), min_size=1, max_size=4),
    horizon=st.integers(1, 6),
    gamma=st.sampled_from([0.5, 0.95, 1.0]),
)
def test_anchors_shared_by_the_whole_group_give_step_groups_that_are_the_episode_groups(
    outcomes, horizon, gamma
):
    """When every episode of a group shows the same history-free state at each step (the credit dial with one
    state per turn and mistakes hidden) and the reward comes at the last step, each anchor group is the whole
    group, and its discounted returns are γ^(T−1−t)·R: their z-score is R's. So HGPO is GRPO and GiGPO is twice
    GRPO (episode term + step term, ω = 1): step-level grouping can add nothing (docs/advantages.md)."""
    rows = [
        {"group_id": f"g{g}", "episode_id": f"g{g}e{e}", "step_idx": t, "anchor_key": f"g{g} turn {t}",
         "step_reward": reward if t == horizon - 1 else 0.0, "episode_reward": reward}
        for g, group in enumerate(outcomes)
        for e, reward in enumerate(group)
        for t in range(horizon)
    ]  # fmt: skip
    steps = pd.DataFrame(rows)
    grpo = compute("grpo", steps)
    np.testing.assert_allclose(
        compute("hgpo", steps, gamma=gamma), grpo, rtol=1e-4, atol=1e-4
    )  # the ε terms differ
    np.testing.assert_allclose(
        compute("gigpo", steps, gamma=gamma), 2 * grpo, rtol=1e-4, atol=1e-4
    )  # the ε terms differ


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(-1, 6)), min_size=1, max_size=40),
    st.booleans(),
)
def test_the_sorting_permutation_is_the_stable_sort_by_episode_then_step(rows, numbered):
    # numbered: each episode's steps 0..n−1 (placed without a sort); otherwise any steps, repeats and gaps
    from creditline.credit.advantages.table import _sort_order

    episode = np.array([e for e, _ in rows], dtype=np.int64)
    step = np.array([s for _, s in rows], dtype=np.int64)
    if numbered:
        step = pd.Series(episode).groupby(episode).cumcount().to_numpy()
        shuffled = np.random.default_rng(len(rows)).permutation(len(rows))
        episode, step = episode[shuffled], step[shuffled]
    episode = np.unique(episode, return_inverse=True)[1].astype(np.int64)  # dense codes, as the table's
    assert _sort_order(episode, step).tolist() == np.lexsort((step, episode)).tolist()
