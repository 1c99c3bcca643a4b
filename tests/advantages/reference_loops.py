"""Plain-loop reference implementations of the advantage estimators (tests and bench only).

Transcribed from the structure of the public reference code — dicts and Python loops over
rows in *batch order* — verl ``core_algos.py`` @b178a3c and verl-agent @20bd331's copy of it
(``traj_index``, ``compute_mean_std_cross_steps``), verl-agent ``gigpo/core_gigpo.py`` and
``recipe/hgpo/core_hgpo.py`` @20bd331, and the A²TGPO / MatchTIR formulas, parameterised by the
same :class:`Conventions` knobs as the vectorised library. With a reference preset's
conventions (``REFERENCE_PRESETS``) they compute what that code computes (in float64 instead of
float32; sums are sequential in batch order): ``"verl"`` = one sample per episode,
``"verl-agent"`` = every step row (cross-steps), ``"igpo-fork"`` / ``"matchtir"`` = turn_group's.

Every function takes a DataFrame whose rows are in batch order and returns a float64 array
aligned with those rows. HGPO (like upstream) assumes each episode's rows appear in time
order; call them on a table sorted by (episode_id, step_idx) unless it already is.
"""

from __future__ import annotations

import math
from collections import defaultdict
from difflib import SequenceMatcher

import numpy as np
import pandas as pd

from creditline.credit.advantages.conventions import Conventions


def _mean(xs):
    s = 0.0
    for x in xs:
        s += x
    return s / len(xs)


def _sigma(xs, mean, ddof, conv: Conventions):
    ss = 0.0
    for x in xs:
        ss += (x - mean) * (x - mean)
    return math.sqrt(ss / max(len(xs) - ddof, 1) + conv.eps_var) + conv.eps_sigma


def _normalise(scores_by_id, ddof, singleton, conv):
    """id -> (mean, std) the way verl does it: singleton raw (0, 1) or own mean."""
    stats = {}
    for idx, xs in scores_by_id.items():
        if len(xs) == 1:
            stats[idx] = (0.0, 1.0 + conv.eps_sigma) if singleton == "raw" else (xs[0], 1.0 + conv.eps_sigma)
        else:
            m = _mean(xs)
            stats[idx] = (m, _sigma(xs, m, ddof, conv))
    return stats


def _div(a, b):
    return a / b if b != 0 else 0.0


def episode_advantage_loop(df: pd.DataFrame, conv: Conventions, scale: bool) -> np.ndarray:
    """verl-agent episode_norm_reward (GiGPO Eq. 3) with the conventions' knobs."""
    index, traj, er = list(df.group_id), list(df.episode_id), list(df.episode_reward)
    id2score, seen = defaultdict(list), set()
    for i in range(len(df)):
        if (index[i], traj[i]) in seen:
            continue
        id2score[index[i]].append(er[i])
        if conv.episode_stats == "trajectory":
            seen.add((index[i], traj[i]))
    stats = _normalise(id2score, conv.ddof_episode, conv.episode_singleton, conv)
    out = np.zeros(len(df))
    for i in range(len(df)):
        mean, std = stats[index[i]]
        out[i] = _div(er[i] - mean, std) if scale else er[i] - mean
    return out


def grpo_loop(df, conv, norm_by_std=True):
    return episode_advantage_loop(df, conv, scale=norm_by_std)


def rloo_loop(df, conv):
    """verl compute_rloo_outcome_advantage: r·n/(n−1) − μ·n/(n−1); singleton → r or 0."""
    index, traj, er = list(df.group_id), list(df.episode_id), list(df.episode_reward)
    id2score, seen = defaultdict(list), set()
    for i in range(len(df)):
        if (index[i], traj[i]) in seen:
            continue
        id2score[index[i]].append(er[i])
        if conv.episode_stats == "trajectory":
            seen.add((index[i], traj[i]))
    out = np.zeros(len(df))
    for i in range(len(df)):
        n = len(id2score[index[i]])
        if n == 1:
            out[i] = er[i] if conv.episode_singleton == "raw" else 0.0
        else:
            mean = _mean(id2score[index[i]])
            out[i] = er[i] * n / (n - 1) - mean * n / (n - 1)
    return out


def reinforce_pp_baseline_loop(df, conv):
    """verl: a = r − μ_g (singleton μ=0 if raw), broadcast to tokens, masked_whiten (per token)."""
    centred = episode_advantage_loop(df, conv, scale=False)
    lengths = list(df.completion_length) if "completion_length" in df else [1] * len(df)
    tokens = [centred[i] for i in range(len(df)) for _ in range(lengths[i])]  # flattened masked tokens
    n_tok = len(tokens)
    if n_tok == 0:
        return np.zeros(len(df))
    mean = sum(tokens) / (n_tok + conv.eps_var)  # verl masked_mean: Σmask + 1e-8
    var = sum((t - mean) ** 2 for t in tokens) / (n_tok + conv.eps_var)
    if conv.ddof_episode == 1:
        var = var * n_tok / (n_tok - 1)  # Bessel on the token count
    sigma = math.sqrt(var + conv.eps_var) + conv.eps_sigma
    return np.array([_div(c - mean, sigma) for c in centred])


def discounted_returns_loop(df, gamma):
    """verl-agent compute_step_discounted_returns, rows of a trajectory in batch order."""
    rewards = list(df.step_reward)
    out = np.zeros(len(df))
    for idxs in _rows_by(df.episode_id).values():
        running = 0.0
        for i in reversed(idxs):
            running = rewards[i] + gamma * running
            out[i] = running
    return out


def _rows_by(keys):
    """key -> list of row positions, in batch order (keys in order of first appearance)."""
    rows = defaultdict(list)
    for i, key in enumerate(keys):
        rows[key].append(i)
    return rows


def build_step_group_loop(df, enable_similarity=False, similarity_thresh=0.95):
    """verl-agent build_step_group with deterministic labels (a counter, not uuid4)."""
    anchors = list(df.anchor_key)
    labels = [None] * len(df)
    next_id = 0
    for locs in _rows_by(df.group_id).values():
        if not enable_similarity:
            clusters = defaultdict(list)
            for loc in locs:
                clusters[anchors[loc]].append(loc)
            for members in clusters.values():
                for loc in members:
                    labels[loc] = next_id
                next_id += 1
            continue
        reps = []  # [(rep, id)], greedy in row order
        for loc in locs:
            for rep, cid in reps:
                if SequenceMatcher(None, anchors[loc], rep).ratio() >= similarity_thresh:
                    labels[loc] = cid
                    break
            else:
                reps.append((anchors[loc], next_id))
                labels[loc] = next_id
                next_id += 1
    return labels


def step_norm_reward_loop(values, labels, conv, scale):
    """verl-agent step_norm_reward (GiGPO Eq. 7)."""
    id2score = defaultdict(list)
    for i in range(len(values)):
        id2score[labels[i]].append(values[i])
    stats = _normalise(id2score, conv.ddof_step, conv.step_singleton, conv)
    out = np.zeros(len(values))
    for i in range(len(values)):
        mean, std = stats[labels[i]]
        out[i] = _div(values[i] - mean, std) if scale else values[i] - mean
    return out


def gigpo_loop(
    df,
    conv,
    mode="mean_std_norm",
    gamma=0.95,
    step_advantage_w=1.0,
    enable_similarity=False,
    similarity_thresh=0.95,
):
    scale = mode == "mean_std_norm"
    episode = episode_advantage_loop(df, conv, scale)
    returns = discounted_returns_loop(df, gamma)
    labels = build_step_group_loop(df, enable_similarity, similarity_thresh)
    step = step_norm_reward_loop(returns, labels, conv, scale)
    return episode + step_advantage_w * step


def hgpo_loop(
    df, conv, mode="mean_std_norm", gamma=0.95, history_length=2, length_weight_alpha=1.0, base_group=False
):
    """verl-agent hgpo_advantage_estimate (clusters by (k, last-k anchors) within a group)."""
    scale = mode == "mean_std_norm"
    returns = discounted_returns_loop(df, gamma)
    base = episode_advantage_loop(df, conv, scale) if base_group else None
    index, traj, anchors = list(df.group_id), list(df.episode_id), list(df.anchor_key)
    out = np.zeros(len(df))
    for group_rows in _rows_by(index).values():
        traj_rows = defaultdict(list)  # traj -> global rows in batch (= time) order
        for i in group_rows:
            traj_rows[traj[i]].append(i)
        clusters = defaultdict(list)
        for rows in traj_rows.values():
            for si in range(len(rows)):
                for k in range(1, min(history_length + 1, si + 1) + 1):
                    seq = tuple(anchors[r] for r in rows[si - k + 1 : si + 1])
                    clusters[(k, seq)].append(rows[si])
        items = defaultdict(list)
        for (k, _), members in clusters.items():
            if len(members) <= 1:
                continue
            r = [returns[m] for m in members]
            mean = _mean(r)
            std = _sigma(r, mean, conv.ddof_step, conv)
            for m, x in zip(members, r, strict=True):
                items[m].append((k, _div(x - mean, std) if scale else x - mean))
        for rows in traj_rows.values():
            for g in rows:
                its = ([(0, base[g])] if base_group else []) + items[g]
                if conv.drop_zero_levels:
                    its = [(k, a) for k, a in its if a != 0]
                if its:
                    w_raw = [(k + 1) ** length_weight_alpha for k, _ in its]
                    total = sum(w_raw) + conv.weight_eps
                    out[g] = sum(w / total * a for w, (_, a) in zip(w_raw, its, strict=True))
    return out


def _turn_zscore_loop(df, values, conv):
    index, steps = list(df.group_id), list(df.step_idx)
    id2score = defaultdict(list)
    for i in range(len(df)):
        id2score[(index[i], steps[i])].append(values[i])
    stats = _normalise(id2score, conv.ddof_step, conv.step_singleton, conv)
    return [
        _div(values[i] - stats[(index[i], steps[i])][0], stats[(index[i], steps[i])][1])
        for i in range(len(df))
    ]


def turn_group_loop(df, conv, variant="a2tgpo", gamma=None, alpha=1.0):
    """A²TGPO: α·D/√(n−t) + Â^O; MatchTIR: (A^traj + z_{g,t}(G))/2."""
    g = {"a2tgpo": 1.0, "matchtir": 0.9}[variant] if gamma is None else gamma
    outcome = episode_advantage_loop(df, conv, scale=True)
    if variant == "matchtir":
        returns = discounted_returns_loop(df, g)
        turn = _turn_zscore_loop(df, list(returns), conv)
        return np.array([(outcome[i] + turn[i]) / 2 for i in range(len(df))])
    n_hat = _turn_zscore_loop(df, list(df.step_reward), conv)
    out = np.zeros(len(df))
    for rows in _rows_by(df.episode_id).values():
        n = len(rows)
        for t in range(n):
            d = sum(g ** (j - t) * n_hat[rows[j]] for j in range(t, n))
            out[rows[t]] = alpha * d / math.sqrt(n - t) + outcome[rows[t]]
    return out


LOOPS = {
    "grpo": grpo_loop,
    "rloo": rloo_loop,
    "reinforce_pp_baseline": reinforce_pp_baseline_loop,
    "gigpo": gigpo_loop,
    "hgpo": hgpo_loop,
    "turn_group": turn_group_loop,
}

REFERENCE_PRESETS = {
    "grpo": ("verl", "verl-agent"),
    "rloo": ("verl", "verl-agent"),
    "reinforce_pp_baseline": ("verl", "verl-agent"),
    "gigpo": ("verl-agent",),
    "hgpo": ("verl-agent",),
    "turn_group": ("igpo-fork", "matchtir"),
}
"""Estimator -> the presets named after the reference code it has (besides "creditline")."""
TURN_GROUP_PRESET = {"a2tgpo": "igpo-fork", "matchtir": "matchtir"}


def reference_presets(name: str, params: dict | None = None) -> tuple[str, ...]:
    """The reference presets valid with ``params`` (turn_group: the one of its variant)."""
    if name == "turn_group":
        return (TURN_GROUP_PRESET[(params or {}).get("variant", "a2tgpo")],)
    return REFERENCE_PRESETS[name]
