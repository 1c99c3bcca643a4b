"""Rounds as dynamic partitions: one key per (experiment, round), `<experiment>.r<NNN>`.

Several experiments share one Dagster instance; the experiment's name in the key keeps their
rounds and files apart. Keys avoid `,`, `|` and `...`, which Dagster's UI backfills cannot take.
"""

from __future__ import annotations

import re
import warnings

import dagster as dg

# Partitioned asset checks ("preview") and the multi-to-single partition mapping ("beta") are relied on
# knowingly. Every asset module imports this one before it defines its assets.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
warnings.filterwarnings("ignore", category=dg.BetaWarning)  # MultiToSingleDimensionPartitionMapping

ROUNDS = dg.DynamicPartitionsDefinition(name="rounds")
RUBRIC_VERSIONS = dg.DynamicPartitionsDefinition(name="rubric_versions")
"""The re-score branch's second dimension: every rubric version registered in code or recorded."""
_KEY = re.compile(r"^(?P<experiment>[a-z0-9][a-z0-9_-]*)\.r(?P<round>\d{3,})$")


def round_key(experiment: str, round_: int) -> str:
    return f"{experiment}.r{round_:03d}"


def parse_round_key(key: str) -> tuple[str, int]:
    match = _KEY.match(key)
    if match is None:
        raise ValueError(f"round partition key {key!r} is not of the form '<experiment>.r<NNN>'")
    return match["experiment"], int(match["round"])
