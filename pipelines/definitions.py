"""The Definitions: round and re-score assets, their jobs, the round sensor, resources bound to the data root."""

from __future__ import annotations

import dagster as dg

from assets import RESCORE, RESCORE_ASSETS, ROUND_ASSETS, ROUND_CHECKS, ROUNDS
from pipelines.sensors import round_failure_sensor, round_sensor
from resources import EngineResource, LineageResource, TrackerResource, default_data_root

ROUND_JOB = "round"
RESCORE_JOB = "rescore"

round_job = dg.define_asset_job(
    ROUND_JOB,
    selection=dg.AssetSelection.groups("round"),
    partitions_def=ROUNDS,
    description="One RL round: rollouts → scores → advantages → checkpoint → evaluation.",
    executor_def=dg.in_process_executor,
)

rescore_job = dg.define_asset_job(
    RESCORE_JOB,
    selection=dg.AssetSelection.groups("rescore"),
    partitions_def=RESCORE,
    description="Re-score one round's stored rollouts with another rubric version; never feeds training.",
    executor_def=dg.in_process_executor,
)


def make_definitions(data_root: str | None = None) -> dg.Definitions:
    root = data_root or default_data_root()
    return dg.Definitions(
        assets=[*ROUND_ASSETS, *RESCORE_ASSETS],
        asset_checks=ROUND_CHECKS,
        jobs=[round_job, rescore_job],
        sensors=[round_sensor, round_failure_sensor],
        resources={
            "lineage": LineageResource(data_root=root),
            "tracker": TrackerResource(data_root=root),
            "engine": EngineResource(),
        },
        executor=dg.in_process_executor,
    )


defs = make_definitions()
