"""A data root's first MLflow open: the store MLflow makes itself, beside the copy of its empty store.

MLflow makes a new SQLite tracking store by creating its first schema and running every Alembic migration
since; `resources.tracking_seed` copies an empty store MLflow made once per version instead. Both run here in
one process, after MLflow is imported and the template is in the cache (each root is new): `--roots` of each
(default 5), alternating, and a line with the median CPU and wall time of each and their ratio.

    .venv/bin/python bench/first_start.py [--roots 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(open_store: Callable[[str], object], where: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    open_store(where)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=5)
    args = parser.parse_args()

    import mlflow

    from resources.tracker import TrackerResource

    with tempfile.TemporaryDirectory(prefix="creditline-first-start-") as folder:
        base = Path(folder)
        TrackerResource(data_root=str(base / "warm")).client()  # the template, made or found; imports done
        own: list[tuple[float, float]] = []
        seeded: list[tuple[float, float]] = []
        for i in range(args.roots):
            (base / f"own{i}").mkdir()
            uri = f"sqlite:///{base / f'own{i}' / 'mlflow.db'}"
            own.append(timed(lambda u: mlflow.MlflowClient(u).search_experiments(max_results=1), uri))
            seeded.append(timed(lambda r: TrackerResource(data_root=r).client().search_experiments(max_results=1),
                                str(base / f"seeded{i}")))  # fmt: skip
    for name, times in (("MLflow makes the store", own), ("a copy of the empty store", seeded)):
        cpu, wall = (statistics.median(t[i] for t in times) for i in (0, 1))
        print(f"{name:<28} {cpu:6.2f} s CPU {wall:6.2f} s wall (median of {len(times)} new roots)")
    ratio = statistics.median(t[1] for t in own) / statistics.median(t[1] for t in seeded)
    print(f"first open of a new root: {ratio:.0f}x faster as a copy")


if __name__ == "__main__":
    main()
