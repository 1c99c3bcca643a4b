"""Dagster assets of one round: rollouts (episodes, steps) → scores → advantages → checkpoint → evaluation."""

from assets.advantages import advantages
from assets.checkpoint import checkpoint
from assets.checks import ROUND_CHECKS
from assets.evaluation import evaluation
from assets.partitions import ROUNDS, parse_round_key, round_key
from assets.rollouts import rollouts
from assets.scores import scores

ROUND_ASSETS = [rollouts, scores, advantages, checkpoint, evaluation]

__all__ = ["ROUNDS", "ROUND_ASSETS", "ROUND_CHECKS", "parse_round_key", "round_key"]
