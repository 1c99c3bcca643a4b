"""pandera models, one per persisted table, and `validate`, which names table, column and row on failure."""

from schemas.tables import (
    AdvantagesTable,
    EpisodesTable,
    EvaluationTable,
    ModelRewardsTable,
    RescoreComparisonTable,
    ScoresTable,
    StepsTable,
    TrainingTable,
)
from schemas.validate import TableValidationError, validate

SCHEMAS = {
    "episodes": EpisodesTable,
    "steps": StepsTable,
    "scores": ScoresTable,
    "advantages": AdvantagesTable,
    "model_rewards": ModelRewardsTable,
    "training": TrainingTable,
    "evaluation": EvaluationTable,
    "rescore_comparison": RescoreComparisonTable,
}

__all__ = ["SCHEMAS", "TableValidationError", "validate", *[s.__name__ for s in SCHEMAS.values()]]
