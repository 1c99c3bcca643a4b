"""Dagster assets: a round (episodes, steps → scores → reward model → advantages → checkpoint →
evaluation) and the re-score branch.

An asset imports the stage code that needs torch or transformers (models, engines, the trainer) inside
its body, when it runs: loading the definitions (the webserver, the daemon, the code server that every
sensor tick runs in, each run's process before its first step) imports neither
(tests/test_import_graph.py)."""

import warnings

import dagster as dg

# Partitioned asset checks ("preview") and the multi-to-single partition mapping ("beta")
# are relied on knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
warnings.filterwarnings("ignore", category=dg.BetaWarning)  # MultiToSingleDimensionPartitionMapping

from assets.advantages import advantages  # noqa: E402
from assets.checkpoint import checkpoint  # noqa: E402
from assets.checks import ROUND_CHECKS  # noqa: E402
from assets.evaluation import evaluation  # noqa: E402
from assets.partitions import ROUNDS, parse_round_key, round_key  # noqa: E402
from assets.rescore import RESCORE, rescored_advantages, rescored_scores  # noqa: E402
from assets.reward_model import reward_model  # noqa: E402
from assets.rollouts import rollouts  # noqa: E402
from assets.round_summary import round_summary  # noqa: E402
from assets.scores import scores  # noqa: E402

ROUND_ASSETS = [rollouts, scores, reward_model, advantages, checkpoint, evaluation, round_summary]
RESCORE_ASSETS = [rescored_scores, rescored_advantages]

__all__ = [
    "RESCORE",
    "RESCORE_ASSETS",
    "ROUNDS",
    "ROUND_ASSETS",
    "ROUND_CHECKS",
    "parse_round_key",
    "round_key",
]
