"""Dagster assets: a round (episodes, steps → scores → reward model → advantages → checkpoint →
evaluation) and the re-score branch."""

import warnings

import dagster as dg
from transformers.utils import logging as transformers_logging

# Partitioned asset checks ("preview") and the multi-to-single partition mapping ("beta")
# are relied on knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
warnings.filterwarnings("ignore", category=dg.BetaWarning)  # MultiToSingleDimensionPartitionMapping
transformers_logging.disable_progress_bar()  # no "Loading weights" bars in every run's log

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
