"""What one lineage transaction costs: through `LineageStore` (the catalog file attached to the process's
in-memory DuckDB for the transaction, then detached: `creditline.store.connection.open_catalog`) against the
same transaction on a DuckDB instance of its own (`duckdb.connect(path)`, then close: how the store opened the
file until 2026-11-27), side by side in one run on one catalog. Both release the file's lock when they end.

A round opens ~23 such connections (one per stage for its reads and one for its records, one per blocking
check, the round's MLflow run link, the round summary: docs/benchmarks.md).

    .venv/bin/python bench/catalog.py [--transactions 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.store import ArtifactRecord, LineageStore  # noqa: E402

QUERY = "SELECT count(*) FROM artifacts WHERE experiment = ?"


def instance_per_transaction(path: str) -> None:
    """The old way: a DuckDB instance opened on the file, one transaction, closed."""
    con = duckdb.connect(path)
    try:
        con.begin()
        con.execute(QUERY, ["exp"]).fetchall()
        con.commit()
    finally:
        con.close()


def median_ms(call, times: int) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = LineageStore(Path(folder) / "lineage.duckdb")
        store.register_experiment("exp", {})
        for r in range(20):
            store.record_artifact(ArtifactRecord("exp", r, "steps", f"/d/{r}", f"h{r}"), [("root", "from")])
        attached = median_ms(lambda: store.fetchall(QUERY, ["exp"]), args.transactions)
        own = median_ms(lambda: instance_per_transaction(store.path), args.transactions)
        memory = median_ms(lambda: duckdb.connect().close(), args.transactions)
    print(f"one lineage transaction, median of {args.transactions}, duckdb {duckdb.__version__}:")
    print(f"  attached to the process's DuckDB (LineageStore): {attached:.2f} ms")
    print(f"  a DuckDB instance of its own (duckdb.connect):    {own:.2f} ms  ({own / attached:.1f}x)")
    print(f"  of which creating an in-memory instance alone:    {memory:.2f} ms")
    print(
        f"  at the 23.5 a round counted in docs/benchmarks.md: {23.5 * attached:.0f} ms against {23.5 * own:.0f} ms"
    )


if __name__ == "__main__":
    main()
