"""Vectorised estimators == the plain-loop references (reference_loops.py), on random multi-step
tables with rows shuffled, for "creditline" and every reference preset of the estimator: the
"verl" runs reproduce verl @b178a3c (one sample per episode), the "verl-agent" runs verl-agent
@20bd331 (cross-step), "igpo-fork" / "matchtir" turn_group's references (to 1e-9, float64)."""

import zlib

import numpy as np
import pandas as pd
import pytest
from adv_tables import random_steps, shuffled
from reference_loops import LOOPS, discounted_returns_loop, reference_presets

from creditline.credit.advantages import compute, discounted_returns
from creditline.credit.advantages.registry import resolve

CASES = [
    ("grpo", {}),
    ("grpo", {"norm_by_std": False}),
    ("rloo", {}),
    ("reinforce_pp_baseline", {}),
    ("gigpo", {}),
    ("gigpo", {"mode": "mean_norm", "gamma": 0.5, "step_advantage_w": 0.7}),
    ("gigpo", {"gamma": 1.0}),
    ("hgpo", {}),
    ("hgpo", {"history_length": 4, "gamma": 0.5}),
    ("hgpo", {"mode": "mean_norm", "base_group": True, "length_weight_alpha": 0.5}),
    ("hgpo", {"base_group": True, "history_length": 1}),
    ("turn_group", {}),
    ("turn_group", {"alpha": 0.3, "gamma": 0.9}),
    ("turn_group", {"variant": "matchtir"}),
]


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Batch order for the loops: sorted by (episode_id, step_idx), as the library sorts."""
    return df.sort_values(["episode_id", "step_idx"], kind="stable").reset_index(drop=True)


def check(name, params, conventions, df, rng, atol=1e-9):
    _, full, conv = resolve(name, {**params, "conventions": conventions})
    ref = canonical(df)
    expected = LOOPS[name](ref, conv, **full)
    shuffled_df, _ = shuffled(ref, rng)
    got = compute(name, shuffled_df, conventions=conventions, **params)
    # align: match rows by (episode_id, step_idx)
    key = pd.MultiIndex.from_frame(shuffled_df[["episode_id", "step_idx"]])
    pos = pd.MultiIndex.from_frame(ref[["episode_id", "step_idx"]]).get_indexer(key)
    np.testing.assert_allclose(got, expected[pos], rtol=1e-9, atol=atol)


PRESET_CASES = [
    pytest.param(name, params, preset, id=f"{name}-{i}-{preset}")
    for i, (name, params) in enumerate(CASES)
    for preset in ("creditline", *reference_presets(name, params))
]


@pytest.mark.parametrize("name,params,conventions", PRESET_CASES)
def test_loop_equals_vectorised(name, params, conventions):
    rng = np.random.default_rng(zlib.crc32(f"{name}{params}{conventions}".encode()))
    for trial in range(12):
        df = random_steps(
            rng,
            n_groups=int(rng.integers(1, 6)),
            group_size=6,
            max_steps=6,
            n_anchors=int(rng.integers(1, 5)),
            discrete=trial % 2 == 0,
        )
        check(name, params, conventions, df, rng)


@pytest.mark.parametrize("conventions", ["creditline", "verl", "verl-agent"])
@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_pp_baseline"])
def test_outcome_with_completion_lengths(name, conventions):
    rng = np.random.default_rng(7)
    for _ in range(5):
        df = random_steps(rng, n_groups=5, group_size=6, max_steps=3, discrete=False)
        df["completion_length"] = rng.integers(0, 9, size=len(df))
        check(name, {}, conventions, df, rng)


@pytest.mark.parametrize("conventions", ["creditline", "verl-agent"])
@pytest.mark.parametrize("thresh", [0.85, 0.95, 0.99])
def test_gigpo_similarity_equals_loop(conventions, thresh):
    rng = np.random.default_rng(int(thresh * 100))
    for _ in range(6):
        df = random_steps(rng, n_groups=3, group_size=5, max_steps=4, n_anchors=6, text_anchors=True)
        check("gigpo", {"enable_similarity": True, "similarity_thresh": thresh}, conventions, df, rng)


def test_gigpo_similarity_merges_near_duplicates():
    # "…box here." and "…box here.!" differ by one char: ratio = 2·49/99 ≈ 0.99 -> one cluster
    df = random_steps(
        np.random.default_rng(3),
        n_groups=2,
        group_size=6,
        max_steps=4,
        n_anchors=2,
        text_anchors=True,
        ragged_groups=False,
    )
    exact = compute("gigpo", df)
    similar = compute("gigpo", df, enable_similarity=True, similarity_thresh=0.95)
    same = compute("gigpo", df.assign(anchor_key=df.anchor_key.str.rstrip("!")))
    np.testing.assert_allclose(similar, same, atol=1e-12)
    assert not np.allclose(similar, exact)


def test_larger_table_all_estimators():
    # bigger groups and longer episodes (one trial: the loops are O(S·H))
    rng = np.random.default_rng(11)
    df = random_steps(rng, n_groups=12, group_size=10, max_steps=15, n_anchors=4, discrete=False)
    for name, params in CASES:
        for conventions in ("creditline", *reference_presets(name, params)):
            check(name, params, conventions, df, rng)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.95, 1.0])
def test_discounted_returns_equals_loop(gamma):
    rng = np.random.default_rng(5)
    df = canonical(random_steps(rng, n_groups=6, group_size=6, max_steps=12, discrete=False))
    shuffled_df, perm = shuffled(df, rng)
    expected = discounted_returns_loop(df, gamma)
    np.testing.assert_allclose(discounted_returns(shuffled_df, gamma), expected[perm], rtol=1e-12, atol=1e-12)


def test_discounted_returns_long_and_ragged_episodes():
    # one 300-step episode among 1-step ones: the backward pass handles ragged depths
    r = np.random.default_rng(2).normal(size=303)
    df = pd.DataFrame(
        {
            "episode_id": ["long"] * 300 + ["a", "b", "c"],
            "step_idx": list(range(300)) + [0, 0, 0],
            "step_reward": r,
        }
    )
    expected = discounted_returns_loop(df, 0.99)
    np.testing.assert_allclose(discounted_returns(df, 0.99), expected, rtol=1e-12)
