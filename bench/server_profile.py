"""The server profile against the local one, measured side by side in one run: lineage writes per second, and
the wall time of a round.

1. Lineage writes: W processes each record N artifacts (one `record_artifact` with two parents each, as a
   stage records a table) at once, into a DuckDB file (local: writers take turns at the file lock) and into
   a Postgres database through DuckDB's postgres extension (server: concurrent transactions). Writes per
   second = W·N / (last writer's end − common start).
2. Rounds: `creditline run` of a small maze experiment (tests/tiny_experiment.toml, `--rounds R`) under
   the local profile, under the server profile with the in-process executor (only the stores change), and
   with the multiprocess executor (every step a process of its own). A round's figure is the wall time
   `creditline run` prints for it; round 1 is left out (it also builds and evaluates the initial policy).
   The checkpoints of the three must hash alike: same work, only the stores and executor differ.

Postgres and the MLflow server are started here, on 127.0.0.1, as the tests start them (tests/servers.py).

    .venv/bin/python bench/server_profile.py [--writers 1 4] [--records 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from creditline.store import LineageStore  # noqa: E402
from tests.servers import mlflow_server, postgres_server  # noqa: E402

TINY = REPO / "tests" / "tiny_experiment.toml"

_WRITER = """
import sys, time
from creditline.store import ArtifactRecord, LineageStore
target, worker, records, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
store = LineageStore(target)
store.experiments()  # connect (and attach) before the clock starts
time.sleep(max(0.0, start - time.time()))
for i in range(records):
    record = ArtifactRecord("bench", i, "w" + worker, "/data/x.parquet", f"{worker}-{i}", rows=10)
    store.record_artifact(record, [("root", "generated_by"), (f"{worker}-{i - 1}" if i else "root2", "computed_from")])
print(time.time())
"""


def writes_per_second(target: str, writers: int, records: int) -> float:
    store = LineageStore(target)
    store.record_initial_policy("bench", "/models/tiny", "root")
    start = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, target, str(w), str(records), str(start)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True) for w in range(writers)]  # fmt: skip
    ends = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a writer failed on {target}")
    written = len(store.artifacts("bench")) - 1
    if written != writers * records:
        raise RuntimeError(f"{target}: {written} rows, expected {writers * records}")
    return written / (max(ends) - start)


_ROUND_LINE = re.compile(r"^round\s+(\d+)/\d+\s.*?([\d.]+) s$")


def round_walls(data_root: Path, rounds: int, deployment: Path | None) -> dict[int, float]:
    data_root.mkdir(parents=True, exist_ok=True)
    config = data_root / "experiment.toml"  # the tiny experiment, `rounds` long
    config.write_text(re.sub(r"(?m)^rounds = \d+$", f"rounds = {rounds}", TINY.read_text()))
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(data_root)}
    env.pop("CREDITLINE_DEPLOYMENT", None)
    if deployment is not None:
        env["CREDITLINE_DEPLOYMENT"] = str(deployment)
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--config", str(config), "--rounds",
                           str(rounds)], cwd=REPO, env=env, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"creditline run failed:\n{done.stderr[-3000:]}")
    return {
        int(m[1]): float(m[2]) for line in done.stdout.splitlines() if (m := _ROUND_LINE.match(line.strip()))
    }


def checkpoints(target: str, rounds: int) -> list[str]:
    store = LineageStore(target)
    name = store.experiments()[0]
    return [store.artifact(name, r, "checkpoint").content_hash[:12] for r in range(1, rounds + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--records", type=int, default=200, help="records per writer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="creditline-bench-server-"))
    with postgres_server() as postgres:
        print(f"lineage writes per second ({args.records} records per writer, 2 parents each)")
        print(f"{'writers':>8} {'DuckDB file':>12} {'Postgres':>10} {'Postgres / file':>16}")
        for writers in args.writers:
            local = writes_per_second(str(base / f"writes-{writers}.duckdb"), writers, args.records)
            server = writes_per_second(postgres.create_database(f"writes_{writers}"), writers, args.records)
            print(f"{writers:>8} {local:>12.0f} {server:>10.0f} {server / local:>16.2f}")

        backend = postgres.create_database("mlflow").replace("postgresql://", "postgresql+psycopg2://")
        with mlflow_server(backend, base / "mlflow-artifacts") as tracking:
            profiles: dict[str, tuple[Path | None, str]] = {
                "local": (None, str(base / "local" / "lineage.duckdb"))
            }
            for executor in ("in_process", "multiprocess"):
                catalog = postgres.create_database(f"lineage_{executor}")
                deployment = base / f"{executor}.toml"
                deployment.write_text(
                    f'[dagster]\npostgres_url = "{postgres.create_database(f"dagster_{executor}")}"\n'
                    f'executor = "{executor}"\n[lineage]\ncatalog = "{catalog}"\n[tracking]\nuri = "{tracking}"\n'
                )
                profiles[f"server, {executor}"] = (deployment, catalog)
            print(f"\nround wall time, rounds 2..{args.rounds} of {TINY.name} (median)")
            local_wall = None
            for name, (deployment, catalog) in profiles.items():
                walls = round_walls(base / name.replace(", ", "-"), args.rounds, deployment)
                wall = statistics.median(walls[r] for r in range(2, args.rounds + 1))
                local_wall = local_wall or wall
                print(f"{name:>24}: {wall:6.1f} s  ({wall / local_wall:.2f}× local)  "
                      f"checkpoints {' '.join(checkpoints(catalog, args.rounds))}")  # fmt: skip


if __name__ == "__main__":
    main()
