"""The held-out evaluation played by a verifiers environment (`[eval.verifiers] env_id`).

Stage 5 of a round (`round.evaluate_policy`'s counterpart): the checkpoint after a round (or the initial
policy), served as a round's rollouts are, plays the environment's eval split, at most `eval.num_tasks`
examples, the same every round, once each, greedily (`verifiers_source.evaluation_run`). The files it saves
are read as an import that is not trained on (`verifiers_import.read_source(for_training=False)`: greedy
sampling and one rollout per example are accepted), so the episode table is an import's: `success` is a
reward > 0, `env_return` the environment's reward, every action valid; `evaluation.summarize` measures it as
it measures creditline's own evaluation.

A module of its own, not in `round.py`: the assets that import `round` would otherwise carry the verifiers
readers and the server in their code versions (`assets/code_version.py`), and go stale when those change.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from creditline.config import ExperimentConfig
from creditline.engines.base import Engine
from creditline.interop.verifiers_import import read_source, source_tables
from creditline.interop.verifiers_source import evaluation_run, play_with_verifiers
from creditline.rollout.evaluation import EvaluationSummary, summarize


def evaluate_in_verifiers(
    config: ExperimentConfig, policy: Engine, policy_folder: str | Path, policy_round: int
) -> tuple[pd.DataFrame, EvaluationSummary]:
    """The policy after `policy_round` (0: the initial one; `policy`, an engine holding `policy_folder`'s
    weights) evaluated by `[eval.verifiers]`: the episode table (E rows, E ≤ `eval.num_tasks`) and its
    summary."""
    with tempfile.TemporaryDirectory() as scratch:
        run = play_with_verifiers(
            evaluation_run(config, policy_round), policy, policy_folder, Path(scratch) / "run"
        )
        tables = source_tables(read_source(run, for_training=False), config.name, policy_round)
    return tables.episodes, summarize(tables.episodes, tables.steps)
