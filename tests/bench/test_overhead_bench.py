"""`bench/overhead.py`'s Dagster floor: a hollow round of the round job's shape, timed from its event log."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


@pytest.fixture(scope="module")
def overhead():
    spec = importlib.util.spec_from_file_location("overhead_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_hollow_round_has_the_round_jobs_assets_checks_and_pool(overhead, tmp_path):
    from pipelines.definitions import ROUND_JOB, make_definitions

    job = make_definitions(str(tmp_path)).resolve_job_def(ROUND_JOB)
    checks = {key.name for key in job.asset_layer.asset_graph.asset_check_keys}
    assets = {node.name for node in job.graph.nodes if not node.name.endswith(tuple(checks))}
    pooled = {node.name for node in job.graph.nodes if getattr(node.definition, "pool", None) == "gpu"}
    shape = overhead.ROUND_SHAPE
    assert assets == set(shape)
    assert checks == {check for _, names, _ in shape.values() for check in names}
    assert pooled == {name for name, (_, _, gpu) in shape.items() if gpu}
    assert all(step in shape for upstream, _, _ in shape.values() for step in upstream)
    # the same order: each step comes after the same steps, directly or not
    node_of = {key: d.op.name for d in make_definitions(str(tmp_path)).assets for key in d.keys}
    real = {d.op.name: {node_of[u] for ups in d.asset_deps.values() for u in ups if u in node_of} - {d.op.name}
            for d in make_definitions(str(tmp_path)).assets if d.op.name in shape}  # fmt: skip
    hollow = {name: set(upstream) for name, (upstream, _, _) in shape.items()}
    assert _before(hollow) == _before(real)


def _before(upstream: dict[str, set[str]]) -> dict[str, set[str]]:
    """Every step's ancestors (the transitive closure of `upstream`)."""
    closure = {name: set(ups) for name, ups in upstream.items()}
    changed = True
    while changed:
        changed = False
        for ancestors in closure.values():
            grown = ancestors.union(*(closure[a] for a in ancestors))
            changed |= grown != ancestors
            ancestors |= grown
    return closure


def test_hollow_rounds_are_timed_from_the_event_log_without_the_first(overhead, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", "")  # the instance sets it; the value before comes back after
    walls = overhead.hollow_rounds(tmp_path, 3)
    assert len(walls) == 2 and all(0 < wall < 30 for wall in walls)
