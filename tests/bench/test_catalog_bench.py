"""`bench/catalog.py` with a few transactions: both ways timed in one run, the ratio printed; and a records session
on a grown catalog with the store's row groups against DuckDB's default."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "catalog.py"


def test_a_short_run_times_both_ways_side_by_side():
    run = subprocess.run([sys.executable, str(BENCH), "--transactions", "5", "--rounds", "40"], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "attached to the process's DuckDB (LineageStore)" in run.stdout
    assert re.search(r"a DuckDB instance of its own \(duckdb.connect\): +[\d.]+ ms +\([\d.]+x\)", run.stdout)
    for rounds in (6, 40):
        assert re.search(rf"after +{rounds} rounds: +[\d.]+ ms with row groups of 2048 rows, +[\d.]+ ms with "
                         r"DuckDB's default \([\d.]+x\)", run.stdout), run.stdout  # fmt: skip
    assert re.search(r"the rollouts' records .*: +[\d.]+ ms in one transaction, +[\d.]+ ms one per record "
                     r"\([\d.]+x\)", run.stdout), run.stdout  # fmt: skip
    assert re.search(r"the checkpoint's reads .*: +[\d.]+ ms the round's by one query, +[\d.]+ ms one query each "
                     r"\([\d.]+x\)", run.stdout), run.stdout  # fmt: skip
