"""The Definitions object: round assets and checks, the `round` job, resources bound to the data root."""

from __future__ import annotations

import dagster as dg

from assets import ROUND_ASSETS, ROUND_CHECKS, ROUNDS
from resources import EngineResource, LineageResource, TrackerResource, default_data_root

ROUND_JOB = "round"

round_job = dg.define_asset_job(
    ROUND_JOB,
    selection=dg.AssetSelection.groups("round"),
    partitions_def=ROUNDS,
    description="One RL round: rollouts → scores → advantages → checkpoint → evaluation.",
    executor_def=dg.in_process_executor,
)


def make_definitions(data_root: str | None = None) -> dg.Definitions:
    root = data_root or default_data_root()
    return dg.Definitions(
        assets=ROUND_ASSETS,
        asset_checks=ROUND_CHECKS,
        jobs=[round_job],
        resources={
            "lineage": LineageResource(data_root=root),
            "tracker": TrackerResource(data_root=root),
            "engine": EngineResource(),
        },
        executor=dg.in_process_executor,
    )


defs = make_definitions()
