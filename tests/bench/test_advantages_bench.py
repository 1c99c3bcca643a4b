"""`bench/advantages.py` on a small table: every estimator's line, timed on the ids as they come and as the stages
read them back from Parquet (categoricals), against each floor."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from tests.bench import BENCH, load_bench

SCRIPT = BENCH / "advantages.py"


def test_a_small_run_prints_every_estimator_against_each_floor():
    run = subprocess.run([sys.executable, str(SCRIPT), "--rows", "20000", "--loop-rows", "4000", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "floor₂, on the table read back from Parquet with string ids" in run.stdout
    header = next(line for line in run.stdout.splitlines() if line.startswith("estimator"))
    assert "read × floor " in header and "read × floor₂" in header
    rows = [line for line in run.stdout.splitlines() if line.split(" ")[0] in {"gigpo", "hgpo", "grpo"}]
    assert len(rows) == 3


def test_the_parquet_round_trip_keeps_every_value_in_order():
    bench = load_bench("advantages")  # not the tests/advantages package
    table = bench.bench_steps(2000).sample(frac=1.0, random_state=0).reset_index(drop=True)
    (strings, _), (categories, _) = bench.parquet_round_trip(table, (), ("episode_id", "anchor_key"))
    pd.testing.assert_frame_equal(strings, table)
    assert isinstance(categories["episode_id"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(categories.astype({"episode_id": object, "anchor_key": object}), table)
