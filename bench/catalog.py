"""What one lineage transaction costs: through `LineageStore` (the catalog file attached to the process's
in-memory DuckDB for the transaction, then detached: `creditline.store.connection.open_catalog`) against the
same transaction on a DuckDB instance of its own (`duckdb.connect(path)`, then close: how the store opened the
file until 2026-11-27), side by side in one run on one catalog. Both release the file's lock when they end.

A round opens ~23 such connections (one per stage for its reads and one for its records, one per blocking
check, the round's MLflow run link, the round summary: docs/benchmarks.md).

It also times a stage's records session on a catalog grown to `--rounds` rounds' rows (an artifact with its
edge and a run recorded through `LineageStore.session`, then detached: the detach checkpoints) with the store's
row groups (`connection.ROW_GROUP_ROWS`) against DuckDB's default ones, on two copies of one grown catalog, and
the same session after 6 rounds: the checkpoint rewrites the last row group of each table written, so with the
default it grew with the catalog.

And, after 6 rounds, a stage's two sessions the way the stages hold them against the way they did before
2026-11-29 (evening), alternated: the records in one transaction (`LineageStore.session(atomic=True)`) against
one transaction per record, and the reads with the round's records fetched by one query (`Stage.reads`) against
one query per record.

    .venv/bin/python bench/catalog.py [--transactions 200] [--rounds 2400]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.store import ArtifactRecord, LineageStore, RunRecord, connection  # noqa: E402

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


KINDS = ("episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation")
"""The artifacts a default round records."""
ASSETS = ("rollouts", "scores", "advantages", "checkpoint", "evaluation")
"""The assets whose runs a default round records (`assets.stage.Stage.produce`), each with the experiment's config
(~1.4 KB of JSON)."""


def grow(con: duckdb.DuckDBPyConnection, rounds: int) -> None:
    """A default experiment's rows for `rounds` rounds, shaped as a round records them, in one statement each."""
    con.execute(
        "INSERT INTO artifacts SELECT 'exp', r, kind, '', '/data/exp/r' || r || '/' || kind, md5(r || kind), 512, "
        "'{\"parent_checkpoint\": \"' || md5(r::VARCHAR) || '\"}', now(), 'run-' || r, '[]' "
        "FROM range(?) t(r), unnest(?::VARCHAR[]) k(kind)",
        [rounds, list(KINDS)],
    )
    con.execute(
        "INSERT INTO lineage SELECT md5(r || kind), md5(r || 'steps'), 'derived_from' "
        "FROM range(?) t(r), unnest(?::VARCHAR[]) k(kind) WHERE kind <> 'steps'",
        [rounds, list(KINDS)],
    )
    con.execute(
        "INSERT INTO runs SELECT 'run-' || r, 'exp', r, asset, md5(r::VARCHAR), 'v1', "
        "'{\"config\": \"' || repeat('x', 1350) || '\"}', now() FROM range(?) t(r), unnest(?::VARCHAR[]) k(asset)",
        [rounds, list(ASSETS)],
    )


def records_session(
    store: LineageStore, n: int, kinds: tuple[str, ...] = ("scores",), atomic: bool = True
) -> None:
    """What a stage records after its work: its artifacts (`kinds`) with their edges, and its run, in one session:
    one transaction (`atomic`, as `Stage.produce` records), or one per record."""
    with store.session(atomic=atomic):
        parent = ("root", "derived_from")
        for kind in kinds:
            store.record_artifact(
                ArtifactRecord("exp", 10**6 + n, kind, f"/d/{n}/{kind}", f"new{n}{kind}"), [parent]
            )
        store.record_run(RunRecord(f"new-{n}", "exp", 10**6 + n, kinds[0], None, "v1", {"a": "x" * 1365}))


def reads_session(store: LineageStore, round_: int, one_query: bool) -> None:
    """What the checkpoint stage reads before its work: its two inputs, the parent checkpoint and what an earlier
    attempt recorded under its two outputs' keys; this round's four by one query of the round's records (as
    `Stage.reads` does), or by one query each."""
    with store.session():
        if one_query:
            found = {r.kind: r for r in store.artifacts("exp", round_)}
            [found.get(kind) for kind in ("steps", "advantages", "checkpoint", "training")]
        else:
            [
                store.artifact("exp", round_, kind)
                for kind in ("steps", "advantages", "checkpoint", "training")
            ]
        store.artifact("exp", round_ - 1, "checkpoint")


def stage_sessions(path: Path, times: int) -> dict[str, tuple[float, float]]:
    """A stage's two sessions each way, alternated, on the catalog at `path`: {session: (ms the stages' way, ms the
    other)}."""
    store = LineageStore(path)
    samples: dict[str, tuple[list[float], list[float]]] = {"records": ([], []), "reads": ([], [])}
    for n in range(times):
        for way, timed in ((0, True), (1, False)):
            start = time.perf_counter()
            records_session(
                store, 10**5 + 2 * n + way, ("episodes", "steps"), atomic=timed
            )  # keys not yet recorded
            samples["records"][way].append(time.perf_counter() - start)
            start = time.perf_counter()
            reads_session(store, 3, one_query=timed)
            samples["reads"][way].append(time.perf_counter() - start)
    return {
        name: (statistics.median(a) * 1000, statistics.median(b) * 1000) for name, (a, b) in samples.items()
    }


def session_ms(path: Path, row_group_rows: int, times: int) -> float:
    """The median records session on the catalog at `path`, its row groups at most `row_group_rows`."""
    kept = connection.ROW_GROUP_ROWS
    connection.ROW_GROUP_ROWS = row_group_rows
    try:
        store = LineageStore(path)
        sessions = iter(range(times))
        return median_ms(lambda: records_session(store, next(sessions)), times)
    finally:
        connection.ROW_GROUP_ROWS = kept


def grown_catalogs(folder: Path, rounds: int, times: int) -> dict[int, tuple[float, float]]:
    """{rounds: (ms with the store's row groups, ms with DuckDB's default)} for 6 and `rounds` rounds."""
    found = {}
    for size in (6, rounds):
        grown = folder / f"grown-{size}.duckdb"
        store = LineageStore(grown)
        store.register_experiment("exp", {})
        with duckdb.connect(str(grown)) as con:  # one row group, as DuckDB's default wrote every catalog
            grow(con, size)
        copy = folder / f"grown-{size}-default.duckdb"
        shutil.copyfile(grown, copy)
        found[size] = (session_ms(grown, connection.ROW_GROUP_ROWS, times), session_ms(copy, 122_880, times))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2400, help="rounds' rows in the grown catalog")
    args = parser.parse_args()
    sessions = min(30, args.transactions)
    with tempfile.TemporaryDirectory() as folder:
        store = LineageStore(Path(folder) / "lineage.duckdb")
        store.register_experiment("exp", {})
        for r in range(20):
            store.record_artifact(ArtifactRecord("exp", r, "steps", f"/d/{r}", f"h{r}"), [("root", "from")])
        attached = median_ms(lambda: store.fetchall(QUERY, ["exp"]), args.transactions)
        own = median_ms(lambda: instance_per_transaction(store.path), args.transactions)
        memory = median_ms(lambda: duckdb.connect().close(), args.transactions)
        grown = grown_catalogs(Path(folder), args.rounds, sessions)
        stages = stage_sessions(Path(folder) / "grown-6.duckdb", sessions)
    print(f"one lineage transaction, median of {args.transactions}, duckdb {duckdb.__version__}:")
    print(f"  attached to the process's DuckDB (LineageStore): {attached:.2f} ms")
    print(f"  a DuckDB instance of its own (duckdb.connect):    {own:.2f} ms  ({own / attached:.1f}x)")
    print(f"  of which creating an in-memory instance alone:    {memory:.2f} ms")
    print(
        f"  at the 23.5 a round counted in docs/benchmarks.md: {23.5 * attached:.0f} ms against {23.5 * own:.0f} ms"
    )
    print(
        f"a stage's records session (an artifact, its edge and a run, then detached), median of {sessions}:"
    )
    for size, (small, default) in grown.items():
        print(f"  after {size:>5} rounds: {small:6.2f} ms with row groups of {connection.ROW_GROUP_ROWS} rows, "
              f"{default:6.2f} ms with DuckDB's default ({default / small:.1f}x)")  # fmt: skip
    print(f"a stage's sessions after 6 rounds, each way alternated, median of {sessions}:")
    ours, other = stages["records"]
    print(f"  the rollouts' records (two artifacts, their edges, the run): {ours:6.2f} ms in one transaction, "
          f"{other:6.2f} ms one per record ({other / ours:.2f}x)")  # fmt: skip
    ours, other = stages["reads"]
    print(f"  the checkpoint's reads (five records, two rounds):          {ours:6.2f} ms the round's by one query, "
          f"{other:6.2f} ms one query each ({other / ours:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
