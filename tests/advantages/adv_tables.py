"""Random step tables for the advantage tests and the benchmark."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

COLUMNS = ["group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward"]


def random_steps(
    rng: np.random.Generator,
    n_groups: int = 4,
    group_size: int = 4,
    max_steps: int = 5,
    n_anchors: int = 3,
    discrete: bool = True,
    ragged_groups: bool = True,
    text_anchors: bool = False,
) -> pd.DataFrame:
    """A small table, rows in (group, episode, step) order.

    discrete=True draws rewards from {0, 0.5, 1, 2} (exact binary fractions, many ties and
    constant groups); otherwise from a normal. ragged_groups varies the group sizes (1..size),
    so singleton groups occur. text_anchors makes near-duplicate sentences for similarity tests.
    """
    rows = []
    for g in range(n_groups):
        size = int(rng.integers(1, group_size + 1)) if ragged_groups else group_size
        for e in range(size):
            n_steps = int(rng.integers(1, max_steps + 1))
            ep_reward = float(rng.choice([0.0, 1.0, 0.5])) if discrete else float(rng.normal())
            for t in range(n_steps):
                a = int(rng.integers(n_anchors))
                anchor = (
                    f"You are in room {a}. There is a {'red' if a % 2 else 'blue'} box here."
                    + ("!" * int(rng.integers(2)))
                    if text_anchors
                    else f"s{a}"
                )
                r = float(rng.choice([0.0, 0.5, 1.0, 2.0])) if discrete else float(rng.normal())
                rows.append((f"g{g}", f"g{g}-e{e}", t, anchor, r, ep_reward))
    return pd.DataFrame(rows, columns=COLUMNS)


def invariance_check(estimator: str, column: str, seed: int) -> None:
    """The estimator's advantages (with a per-step `column` of normal values and 0/1 outcomes) do not depend on
    the row order or on the groups' names."""
    from creditline.credit.advantages import compute

    rng = np.random.default_rng(seed)
    rows = []
    for g in range(3):
        for e in range(int(rng.integers(1, 4))):
            outcome = float(rng.integers(0, 2))
            for t in range(int(rng.integers(1, 4))):
                rows.append((f"g{g}", f"g{g}e{e}", t, outcome, float(rng.normal())))
    frame = pd.DataFrame(rows, columns=["group_id", "episode_id", "step_idx", "episode_reward", column])
    frame = frame.assign(anchor_key="s", step_reward=0.0)
    index = ["episode_id", "step_idx"]
    adv = pd.Series(compute(estimator, frame), index=pd.MultiIndex.from_frame(frame[index]))
    moved = frame.sample(frac=1, random_state=seed).assign(group_id=lambda f: "x" + f["group_id"])
    again = pd.Series(compute(estimator, moved), index=pd.MultiIndex.from_frame(moved[index]))
    pd.testing.assert_series_equal(adv.sort_index(), again.sort_index())


def shuffled(df: pd.DataFrame, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    """(df with rows permuted and a fresh RangeIndex, the permutation)."""
    perm = rng.permutation(len(df))
    return df.iloc[perm].reset_index(drop=True), perm


def bench_steps(
    n_rows: int, seed: int = 0, group_size: int = 8, mean_steps: int = 8, pool: int = 20
) -> pd.DataFrame:
    """~n_rows step rows: groups of ``group_size`` episodes of 4..2·mean_steps−4 steps; each group
    has its own pool of ``pool`` anchor states (so anchors recur within a group), string ids."""
    rng = np.random.default_rng(seed)
    n_ep = max(group_size, int(round(n_rows / mean_steps)) // group_size * group_size)
    lengths = rng.integers(4, 2 * mean_steps - 3, size=n_ep)  # mean = mean_steps
    ep = np.repeat(np.arange(n_ep), lengths)
    starts = np.cumsum(lengths) - lengths
    step = np.arange(len(ep)) - np.repeat(starts, lengths)
    group = ep // group_size
    state = rng.integers(pool, size=len(ep))
    success = rng.random(n_ep) < 0.4
    step_reward = np.where(step == np.repeat(lengths, lengths) - 1, np.repeat(success, lengths) * 10.0, 0.0)
    step_reward -= 0.1 * (rng.random(len(ep)) < 0.2)  # invalid-action style penalties
    gid = pd.Series(group).map("task{:06d}".format)
    return pd.DataFrame(
        {
            "group_id": gid.to_numpy(dtype=object),
            "episode_id": (gid + pd.Series(ep % group_size).map("/sample{}".format)).to_numpy(dtype=object),
            "step_idx": step,
            "anchor_key": _hash_keys(group * pool + state),
            "step_reward": step_reward,
            "episode_reward": np.repeat(success.astype(np.float64), lengths),
        }
    )


def _hash_keys(codes: np.ndarray) -> np.ndarray:
    """Anchor keys as the pipeline writes them: 16-hex content hashes (one per distinct state)."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    keys = np.array([hashlib.sha256(f"state-{u}".encode()).hexdigest()[:16] for u in uniq], dtype=object)
    return keys[inverse]
