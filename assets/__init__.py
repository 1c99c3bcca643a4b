"""Dagster assets: a round (episodes, steps → scores → reward model → advantages → checkpoint →
evaluation) and the re-score branch.

An asset imports the stage code that needs torch or transformers (models, engines, the trainer) inside
its body, when it runs: loading the definitions (the webserver, the daemon, the code server that every
sensor tick runs in, each run's process before its first step) imports neither
(tests/test_import_graph.py).

The package itself imports nothing: its names below are imported on first use (PEP 562), so a process that
needs one module of it does not pay for the others. `assets.train_worker`, one torchrun rank of the
training stage, imports neither Dagster nor the other assets (3-4 s of CPU per rank, per round).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assets.checks import ROUND_CHECKS
    from assets.partitions import ROUNDS, parse_round_key, round_key
    from assets.rescore import RESCORE

_HOMES = {
    "ROUND_CHECKS": "assets.checks",
    "ROUNDS": "assets.partitions",
    "parse_round_key": "assets.partitions",
    "round_key": "assets.partitions",
    "RESCORE": "assets.rescore",
}
"""Where each name that is not a list below lives."""
_ROUND = ("rollouts", "scores", "reward_model", "advantages", "checkpoint", "evaluation", "round_summary")
_RESCORE = ("rescored_scores", "rescored_advantages")


def __getattr__(name: str) -> Any:
    if name == "ROUND_ASSETS":  # the round's assets, in the order of the round
        return [getattr(importlib.import_module(f"assets.{module}"), module) for module in _ROUND]
    if name == "RESCORE_ASSETS":
        return [getattr(importlib.import_module("assets.rescore"), asset) for asset in _RESCORE]
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'assets' has no attribute {name!r}")


__all__ = [
    "RESCORE",
    "RESCORE_ASSETS",
    "ROUNDS",
    "ROUND_ASSETS",
    "ROUND_CHECKS",
    "parse_round_key",
    "round_key",
]
