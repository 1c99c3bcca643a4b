"""What a killed process leaves (a STARTED run, a held pool slot, a lease) is reported by `verify` and
cleaned by the next `rescore` or `register`; a killed `rescore` is completed by running it again.

Before: `verify` said 0 problems on a root with dead STARTED runs, held slots and stale leases, and a
killed `rescore` left its run STARTED until the next `creditline run`.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
LEFTOVERS = {"dead_run", "held_slot", "stale_lease"}


def _leftovers(data_root: Path) -> dict[str, list[str]]:
    verify = creditline(data_root, "verify", "--experiment", "left", "--json")
    found: dict[str, list[str]] = {}
    for problem in json.loads(verify.stdout):
        if problem["kind"] in LEFTOVERS:
            found.setdefault(problem["kind"], []).append(problem["detail"])
    return found


def _statuses(data_root: Path) -> list[tuple[str, str]]:
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    runs = sorted((r.job_name, r.status.value) for r in instance.get_runs())
    instance.dispose()
    return runs


def test_leftovers_of_killed_runs_are_reported_then_cleaned(tmp_path, preloaded_cli):
    run = ("run", "--experiment", "left", "--config", str(TINY), "--rounds", "1")
    # killed in training: holding the `gpu` slot and the lease
    killed = preloaded_cli.killed_at(tmp_path, "train:update:1", *run)
    assert killed.returncode == -9, killed.stderr

    found = _leftovers(tmp_path)
    assert sorted(found) == sorted(LEFTOVERS), found
    assert all(detail.endswith("`creditline run`, `rescore` or `register` cleans it up")
               for details in found.values() for detail in details)  # fmt: skip
    assert "pool 'gpu' slot held by dagster run" in found["held_slot"][0]
    assert "experiment 'left': lease held by a `creditline run` that is gone" in found["stale_lease"][0]

    rescore = ("rescore", "--experiment", "left", "--rubric", "env-efficient", "--rounds", "1")
    killed_rescore = preloaded_cli.killed_at(tmp_path, "after:rescore_scores:1", *rescore)
    assert killed_rescore.returncode == -9, killed_rescore.stderr
    assert "cleaned up dagster run" in killed_rescore.stdout  # it reclaimed the killed round before its own
    assert "released experiment 'left''s lease" in killed_rescore.stdout
    found = _leftovers(tmp_path)
    assert list(found) == ["dead_run"] and "(rescore left.r001|env-efficient" in found["dead_run"][0], found

    again = creditline(tmp_path, *rescore)
    assert again.returncode == 0, again.stderr
    assert "cleaned up dagster run" in again.stdout
    assert [line.split()[0] for line in again.stdout.splitlines()[-2:]] == ["round", "1"]  # its table
    assert _leftovers(tmp_path) == {}
    # the killed round, the killed rescore, the re-run
    assert _statuses(tmp_path) == [("rescore", "FAILURE"), ("rescore", "SUCCESS"), ("round", "FAILURE")]


def test_register_cleans_what_a_killed_run_left(tmp_path, preloaded_cli):
    killed = preloaded_cli.killed_at(
        tmp_path, "write:episodes.parquet:1", "run", "--experiment", "left", "--config", str(TINY)
    )
    assert killed.returncode == -9, killed.stderr
    assert sorted(_leftovers(tmp_path)) == sorted(LEFTOVERS)
    registered = creditline(tmp_path, "register", "--experiment", "left", "--config", str(TINY))
    assert registered.returncode == 0, registered.stderr
    assert "cleaned up dagster run" in registered.stdout and "pool slots freed" in registered.stdout
    assert _leftovers(tmp_path) == {}
