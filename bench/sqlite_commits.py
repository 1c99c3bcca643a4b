"""What one SQLite commit costs on this machine the way Dagster's event log makes it (open, insert, commit,
close: a fresh connection per event) and the way MLflow's store does (a pooled connection), under SQLite's
defaults and under the settings that would relax them.

Side by side in one run, each case on a fresh file in one temporary folder, `--commits` times:
- Dagster's way: WAL at FULL (how Dagster creates its storages); WAL at NORMAL; WAL at NORMAL with the file
  kept open by another connection (the last close of a WAL database checkpoints it, which waits for the disk
  even at NORMAL).
- MLflow's way: the rollback journal MLflow creates its store in, at FULL; WAL at NORMAL.

What the figures mean for a round, and why creditline does not change these settings, is in
docs/benchmarks.md ("Dagster's floor").

    .venv/bin/python bench/sqlite_commits.py [--commits 200]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool


def _engine(path: Path, journal: str, sync: str, pooled: bool) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{path}", **({} if pooled else {"poolclass": NullPool}))

    @sa.event.listens_for(engine, "connect")
    def settings(dbapi_connection, _record):
        dbapi_connection.execute(f"PRAGMA journal_mode={journal}")
        dbapi_connection.execute(f"PRAGMA synchronous={sync}")

    with engine.begin() as con:
        con.exec_driver_sql("CREATE TABLE events (payload TEXT)")
    return engine


def _per_commit_ms(engine: sa.Engine, commits: int) -> float:
    start = time.perf_counter()
    for i in range(commits):
        with engine.begin() as con:  # NullPool: a connection opened and closed per commit, as Dagster's
            con.exec_driver_sql("INSERT INTO events VALUES (?)", (f"event {i}",))
    return (time.perf_counter() - start) / commits * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sqlite-commits-"))
    results = {}
    for name, journal, sync, pooled, pinned in [
        ("Dagster's way, WAL, FULL (default)", "WAL", "FULL", False, False),
        ("Dagster's way, WAL, NORMAL", "WAL", "NORMAL", False, False),
        ("Dagster's way, WAL, NORMAL, file kept open", "WAL", "NORMAL", False, True),
        ("MLflow's way, rollback journal, FULL (default)", "DELETE", "FULL", True, False),
        ("MLflow's way, WAL, NORMAL", "WAL", "NORMAL", True, False),
    ]:
        path = folder / f"{len(results)}.db"
        engine = _engine(path, journal, sync, pooled)
        pin = None
        if (
            pinned
        ):  # a connection that has read, so it maps the WAL index: the others' closes are not the last
            pin = sqlite3.connect(path)
            pin.execute("SELECT count(*) FROM sqlite_master").fetchall()
        results[name] = _per_commit_ms(engine, args.commits)
        engine.dispose()
        if pin is not None:
            pin.close()
    print(f"{args.commits} commits each, in {folder}")
    for name, ms in results.items():
        print(f"  {name:<48} {ms:7.2f} ms a commit")
    dagster = (
        results["Dagster's way, WAL, FULL (default)"] / results["Dagster's way, WAL, NORMAL, file kept open"]
    )
    mlflow = results["MLflow's way, rollback journal, FULL (default)"] / results["MLflow's way, WAL, NORMAL"]
    print(f"relaxed: Dagster's way {dagster:.0f}x faster a commit, MLflow's way {mlflow:.0f}x faster")


if __name__ == "__main__":
    main()
