"""`bench/overhead.py`'s Dagster floor: a hollow round of the round job's graph, timed from its event log."""

from __future__ import annotations

import pytest

from tests.bench import load_bench


@pytest.fixture(scope="module")
def overhead():
    return load_bench("overhead")


def test_the_hollow_round_has_the_round_jobs_graph(overhead, tmp_path):
    """The same steps, each materialising the same assets from the same parents at the same code version and
    partitions, in the same pool, and the same blocking checks on the same partitions."""
    from pipelines.definitions import ROUND_JOB, make_definitions

    real = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
    hollow = overhead.hollow_job(str(tmp_path))
    assert _shape(hollow) == _shape(real)
    assert {node.name for node in real.graph.nodes} >= {"rollouts", "advantages", "checkpoint", "evaluation"}


def _shape(job) -> tuple:
    graph = job.asset_layer.asset_graph
    assets = {  # asset: (its step, its parents, its code version, its partitions)
        key: (
            graph.get(key).assets_def.node_def.name,
            sorted(graph.get(key).parent_keys),
            graph.get(key).code_version,
            graph.get(key).partitions_def,
        )
        for key in graph.materializable_asset_keys
    }
    steps = {node.name: getattr(node.definition, "pool", None) for node in job.graph.nodes}
    checks = {key: (graph.get_check_spec(key).blocking, graph.get_check_spec(key).partitions_def)
              for key in graph.asset_check_keys}  # fmt: skip
    return assets, steps, checks


def test_hollow_rounds_are_timed_from_the_event_log_without_the_first(overhead, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", "")  # the instance sets it; the value before comes back after
    hollow = overhead.HollowRounds(tmp_path)
    walls = [hollow.next_wall(), hollow.next_wall()]
    assert hollow.runs == 3 and all(0 < wall < 30 for wall in walls)
