"""Vectorised segment primitives: group z-scores, dense codes, discounted returns.

Group statistics use ``np.bincount`` over dense codes (sequential sums in row order, so the
result depends only on the canonical row order of :mod:`.table`). The variance is two-pass
(Σ(x−μ)², not Σx² − (Σx)²/n) to avoid cancellation.

    σ_eff = sqrt(Σ(x−μ)² / max(n − ddof, 1) + eps_var) + eps_sigma
    a     = (x − μ) / σ_eff            (scale=True)      a = x − μ   (scale=False)

Singleton groups (n = 1): ``"raw"`` → μ=0, σ=1 (a = x/(1+eps_sigma), or x unscaled, as verl);
``"zero"`` → μ = x, a = 0. A zero σ_eff (constant group with both ε = 0) gives a = 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .conventions import Singleton


def dense_codes(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Map an int64 key (S,) to dense codes (S,) in order of first appearance, and their count.

    pandas' hash factorisation is O(S) (np.unique would sort, O(S log S)); codes are labels only.
    """
    codes, uniques = pd.factorize(key, sort=False)
    return codes.astype(np.int64, copy=False), len(uniques)


def pair_codes(a: np.ndarray, b: np.ndarray, n_b: int) -> tuple[np.ndarray, int]:
    """Dense codes of the pairs (a_i, b_i), with 0 <= b < n_b (a * n_b + b must fit int64)."""
    return dense_codes(a.astype(np.int64) * np.int64(max(n_b, 1)) + b)


def group_zscore(
    x: np.ndarray,
    codes: np.ndarray,
    n_codes: int,
    *,
    ddof: int,
    eps_sigma: float,
    eps_var: float,
    singleton: Singleton,
    scale: bool = True,
) -> np.ndarray:
    """(x − μ_g)/σ_g per element, g = codes; x (N,) float64, codes (N,) in [0, n_codes)."""
    count = np.bincount(codes, minlength=n_codes)  # (n_codes,)
    mean = np.bincount(codes, weights=x, minlength=n_codes) / np.maximum(count, 1)
    single = count == 1
    if singleton == "raw":
        mean[single] = 0.0
    dev = x - mean[codes]  # (N,)
    if not scale:
        return dev
    ss = np.bincount(codes, weights=dev * dev, minlength=n_codes)
    sigma = np.sqrt(ss / np.maximum(count - ddof, 1) + eps_var) + eps_sigma
    if singleton == "raw":
        sigma[single] = 1.0 + eps_sigma
    return safe_divide(dev, sigma[codes])


def leave_one_out(x: np.ndarray, codes: np.ndarray, n_codes: int, *, singleton: Singleton) -> np.ndarray:
    """RLOO: x_i − mean_{j≠i} x_j = n/(n−1)·(x_i − μ_g); singleton → x ("raw") or 0 ("zero")."""
    count = np.bincount(codes, minlength=n_codes)
    mean = np.bincount(codes, weights=x, minlength=n_codes) / np.maximum(count, 1)
    n = count[codes].astype(np.float64)
    out = safe_divide(n, n - 1.0) * (x - mean[codes])
    single = n == 1
    out[single] = x[single] if singleton == "raw" else 0.0
    return out


def weighted_whiten(
    x: np.ndarray,
    weights: np.ndarray,
    *,
    eps_var: float,
    ddof: float = 1.0,
    eps_count: float = 0.0,
    eps_sigma: float = 0.0,
) -> np.ndarray:
    """Batch whitening of all rows, row r counted weights[r] times (its tokens): verl's ``masked_whiten``.

        N = Σ w
        m = Σ w·x / (N + eps_count)
        v = Σ w·(x − m)² / (N + eps_count) · N / max(N − ddof, 1)
        a = (x − m) / (sqrt(v + eps_var) + eps_sigma)

    (verl's ``masked_mean`` divides by Σmask + 1e-8: eps_count = 1e-8 there.) No weight at all → zeros.
    """
    n = float(weights.sum())
    if n == 0.0:
        return np.zeros(len(x))
    count = n + eps_count
    mean = float(np.dot(weights, x)) / count
    dev = x - mean
    var = float(np.dot(weights, dev * dev)) / count * (n / max(n - ddof, 1.0))
    return safe_divide(dev, np.float64(np.sqrt(var + eps_var) + eps_sigma))


def safe_divide(num: np.ndarray, den: np.ndarray | np.floating) -> np.ndarray:
    """num/den where den != 0, else 0 (no warnings)."""
    out = np.zeros(np.broadcast(num, den).shape, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


def discounted_suffix_sum(
    values: np.ndarray, ep_start: np.ndarray, ep_len: np.ndarray, gamma: float
) -> np.ndarray:
    """R_t = Σ_{k≥t} γ^{k−t} v_k within each episode (GiGPO Eq. 5), rows sorted by (episode, step).

    values (S,), ep_start/ep_len (E,). Backward recursion R_t = v_t + γ·R_{t+1}, vectorised over
    episodes: one numpy pass per step depth t (max_len passes, O(S) work in total), touching
    only the episodes longer than t. Same arithmetic and order as the reference loop.
    """
    out = np.zeros(values.shape[0], dtype=np.float64)
    if values.shape[0] == 0:
        return out
    by_len = np.argsort(-ep_len, kind="stable")  # (E,) longest first
    starts, lens = ep_start[by_len], ep_len[by_len]
    desc = lens[::-1]  # ascending
    for t in range(int(lens[0]) - 1, -1, -1):
        m = len(lens) - int(np.searchsorted(desc, t, side="right"))  # episodes with len > t
        rows = starts[:m] + t
        nxt = np.zeros(m, dtype=np.float64)
        has_next = lens[:m] > t + 1
        nxt[has_next] = out[rows[has_next] + 1]
        out[rows] = values[rows] + gamma * nxt
    return out
