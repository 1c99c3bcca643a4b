"""Step scalars -> per-token advantages, and the verifiers fill-if-None rule.

verifiers ``Rubric.score_group`` (and PR #941 ``_populate_step_completion_advantages``):

    step.advantage = step.advantage if set by the environment else the rollout's advantage
    completion_advantages = [step.advantage] * len(step.tokens.completion_ids)

(after any ``max_seq_len`` truncation of ``completion_ids``). Upstream an unset advantage gives
``completion_advantages = None``; here advantages must be filled first (``fill_preset``) and
non-finite values are rejected. Prompt / environment tokens are not covered: the trainer gives
them 0 (prime-rl PR #1838).

Shapes: S steps, T = Σ completion_lengths tokens.
"""

from __future__ import annotations

import numpy as np

from .table import AdvantageInputError


def _check(step_advantage: np.ndarray, completion_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    adv = np.asarray(step_advantage, dtype=np.float64)
    lengths = np.asarray(completion_lengths)
    if adv.ndim != 1 or lengths.shape != adv.shape:
        raise AdvantageInputError(
            f"step_advantage {adv.shape} and completion_lengths {lengths.shape} "
            "must be 1-D arrays of the same length"
        )
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise AdvantageInputError(f"completion_lengths must be integers, got dtype {lengths.dtype}")
    if (lengths < 0).any():
        i = int(np.flatnonzero(lengths < 0)[0])
        raise AdvantageInputError(f"completion_lengths: negative length {int(lengths[i])} at step {i}")
    if not np.isfinite(adv).all():
        i = int(np.flatnonzero(~np.isfinite(adv))[0])
        raise AdvantageInputError(
            f"step_advantage: non-finite value {float(adv[i])!r} at step {i} (fill it first)"
        )
    return adv, lengths.astype(np.int64)


def completion_advantages_flat(
    step_advantage: np.ndarray, completion_lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(values (T,) float64, offsets (S+1,) int64): step s owns values[offsets[s]:offsets[s+1]]."""
    adv, lengths = _check(step_advantage, completion_lengths)
    offsets = np.zeros(adv.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.repeat(adv, lengths), offsets


def completion_advantages(step_advantage: np.ndarray, completion_lengths: np.ndarray) -> list[np.ndarray]:
    """One array per step: the step's scalar repeated completion_lengths[s] times (verifiers #941)."""
    values, offsets = completion_advantages_flat(step_advantage, completion_lengths)
    return np.split(values, offsets[1:-1])


def fill_preset(preset: np.ndarray, computed: np.ndarray) -> np.ndarray:
    """verifiers fill-if-None: keep preset[s] where set (not NaN), else computed[s]. (S,)"""
    pre = np.asarray(preset, dtype=np.float64)
    comp = np.asarray(computed, dtype=np.float64)
    if pre.shape != comp.shape or pre.ndim != 1:
        raise AdvantageInputError(
            f"preset {pre.shape} and computed {comp.shape} must be 1-D of the same length"
        )
    if np.isinf(pre).any():
        i = int(np.flatnonzero(np.isinf(pre))[0])
        raise AdvantageInputError(f"preset: infinite value at step {i} (NaN means unset)")
    unset = np.isnan(pre)
    if not np.isfinite(comp[unset]).all():
        i = int(np.flatnonzero(unset & ~np.isfinite(comp))[0])
        raise AdvantageInputError(f"computed: non-finite value {float(comp[i])!r} at unset step {i}")
    return np.where(unset, comp, pre)
