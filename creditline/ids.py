"""Deterministic identifiers and seeds.

Every id is derived from (experiment, round, task, sample, step), never drawn at random, so the
same inputs name the same rows in every re-run and content hashes are reproducible.
"""

from __future__ import annotations

import hashlib
import json


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


def stable_hash(obj: object, length: int = 16) -> str:
    """sha256 of canonical JSON (sorted keys): equal configs give equal hashes."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def branch_episode_id(source_episode_id: str, step_idx: int, continuation: int) -> str:
    """Continuation `continuation` sampled from step `step_idx` of `source_episode_id`
    (`creditline.branching`)."""
    return f"{source_episode_id}:b{step_idx}.{continuation}"
