"""`creditline verify` says what it checked, over every experiment of a data root unless narrowed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from creditline.store import LineageStore, atomic_directory, hash_directory, write_parquet_atomic
from creditline.store.data_root import CATALOG
from creditline.store.records import ArtifactRecord
from tests.e2e.cli import creditline

EXPERIMENTS = ("alpha", "beta")


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """Two registered experiments, each an initial policy (a folder) and a round-0 table made from it."""
    store = LineageStore(tmp_path / CATALOG)
    for name in EXPERIMENTS:
        store.register_experiment(name, {"name": name})
        policy = tmp_path / name / "r000" / "policy"
        with atomic_directory(policy) as folder:
            (folder / "weights.bin").write_bytes(name.encode())
        initial = store.record_initial_policy(name, str(policy), hash_directory(policy))
        table = write_parquet_atomic(
            pd.DataFrame({"x": [name]}), tmp_path / name / "r000" / "evaluation.parquet"
        )
        evaluation = ArtifactRecord(name, 0, "evaluation", table.path, table.content_hash, rows=table.rows)
        store.record_artifact(evaluation, [(initial.content_hash, "evaluates")])
    return tmp_path


def _summary(name: str) -> str:
    return (
        f"checked {name!r}: 2 artifacts re-hashed (1 files, 1 folders), 0 of 0 rounds committed, "
        "1 lineage edges, 0 MLflow runs"
    )


def test_verify_checks_every_experiment_and_says_what_it_checked(data_root: Path) -> None:
    result = creditline(data_root, "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [_summary("alpha"), _summary("beta")]
    assert lines[-1] == "0 problem(s) in 2 experiment(s) (alpha, beta)"


def test_a_problem_in_one_experiment_fails_verify_and_narrowing_leaves_it_out(data_root: Path) -> None:
    (data_root / "beta" / "r000" / "evaluation.parquet").write_bytes(b"tampered")
    everything = creditline(data_root, "verify")
    assert everything.returncode == 1
    (problem,) = [line for line in everything.stdout.splitlines() if line.lstrip().startswith("changed")]
    assert "beta/0/evaluation" in problem
    assert everything.stdout.splitlines()[-1] == "1 problem(s) in 2 experiment(s) (alpha, beta)"
    alpha = creditline(data_root, "verify", "--experiment", "alpha")
    assert alpha.returncode == 0 and alpha.stdout.splitlines()[0] == _summary("alpha")
    assert alpha.stdout.splitlines()[-1] == "0 problem(s) in experiment 'alpha'"
    as_json = creditline(data_root, "verify", "--json")
    assert as_json.returncode == 1 and [p["kind"] for p in json.loads(as_json.stdout)] == ["changed"]
    assert _summary("beta") in as_json.stderr and "1 problem(s)" in as_json.stderr
