"""Deterministic identifiers and seeds.

Every id is derived from (experiment, round, task, sample, step), never drawn at random, so the
same inputs name the same rows in every re-run and content hashes are reproducible. A value's identity
(a config, an estimator's params, a rubric) is the hash of its canonical JSON, made by `canonical_hash`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any


def group_id(experiment: str, round_: int, task: int) -> str:
    """All samples of one task in one round: the group that GRPO-style baselines compare within."""
    return f"{experiment}:r{round_}:t{task}"


def episode_id(experiment: str, round_: int, task: int, sample: int) -> str:
    return f"{group_id(experiment, round_, task)}:s{sample}"


def anchor_key(anchor: str) -> str:
    """Canonical hash of a history-free observation (16 hex chars of sha256)."""
    return hashlib.sha256(anchor.encode()).hexdigest()[:16]


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any tuple of parts, stable across processes and Python versions."""
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def canonical_json(
    obj: object,
    *,
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
    allow_nan: bool = True,
) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings (and hashes).

    The keywords are `json.dumps`'s. The defaults are those of the catalog's JSON text and of config hashes:
    non-ASCII kept as is, NaN written, a value JSON lacks refused (TypeError); `canonical_hash` says which
    hashes differ."""
    return json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=ensure_ascii,
        default=default,
        allow_nan=allow_nan,
    )


def canonical_hash(
    obj: object,
    length: int = 16,
    *,
    ensure_ascii: bool = False,
    default: Callable[[Any], Any] | None = None,
    allow_nan: bool = True,
) -> str:
    """The first `length` hex digits of the sha256 of `canonical_json(obj, ...)` in UTF-8.

    Every canonical-JSON hash of creditline is made here. Each kind keeps the keywords it was first made with,
    since stored and pinned hashes depend on them (they differ only for non-ASCII text, values JSON lacks,
    NaN): configs (`store.config_hash`) take the defaults; estimator params (`advantages.params_hash`) escape
    non-ASCII and refuse NaN; rubric versions, response ids and imported rollouts' content escape non-ASCII
    and hash `str()` of values JSON lacks."""
    text = canonical_json(obj, ensure_ascii=ensure_ascii, default=default, allow_nan=allow_nan)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def branch_episode_id(source_episode_id: str, step_idx: int, continuation: int) -> str:
    """Continuation `continuation` sampled from step `step_idx` of `source_episode_id`
    (`creditline.rollout.branching`)."""
    return f"{source_episode_id}:b{step_idx}.{continuation}"
