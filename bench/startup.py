"""Start-up: the wall time of the CLI's commands that only read the catalog, beside an empty interpreter's.

Every `creditline` call pays for what its process imports before it does anything: `creditline --help` cost
5 to 6 s of CPU while `creditline.config` imported torch and transformers through the step-reward model
(issue 26). The target is under 1 s of wall time for `--help`, `report` and `lineage` on an idle machine.
"dagster definitions" is what loading the Dagster definitions costs: the webserver, the daemon, the code server
and every run's process pay it before their first step (the stages import torch when they run). "policy
imports" is what a process that loads a policy pays (torch, transformers' models through `creditline.policy.hf`,
without scikit-learn's metrics), beside "transformers model": one model class imported from transformers
directly, which brings `sklearn.metrics`.

Each command runs as a whole process, as a user starts it (the venv's `creditline` script beside this Python,
with this checkout first on `PYTHONPATH`): one untimed run, then `--repeat` timed runs (default 3). A line per
command gives the best wall time, the CPU time (user + system) of that run, and the ratio of the wall time to
`python -c pass`'s, the interpreter's own start.

`report` and `lineage` read a data root with one finished round: `--data-root DIR` (or
`$CREDITLINE_BENCH_DATA_ROOT`) names one; else the bench makes one the first time, with `creditline run
--config tests/tiny_experiment.toml --rounds 1` into `bench/.startup-data/` (about 20 s), and reuses it.

    .venv/bin/python bench/startup.py [--data-root DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT_ENV = "CREDITLINE_BENCH_DATA_ROOT"
DEFAULT_DATA_ROOT = ROOT / "bench" / ".startup-data"
COMMANDS = (["--help"], ["report"], ["lineage"])


def creditline() -> list[str]:
    """The `creditline` script of this Python's venv (what a user runs), else the module it calls."""
    script = Path(sys.executable).parent / "creditline"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pipelines.cli"]


def environment(data_root: Path) -> dict[str, str]:
    """This checkout's code (not an installed copy's) on a data root of the bench's, nothing else deployed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CREDITLINE_DATA_ROOT": str(data_root)}
    env.pop("CREDITLINE_DEPLOYMENT", None)
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `argv`, which must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    """The fastest of `repeat` timed runs after an untimed one (which fills the page cache)."""
    timed(argv, env)
    return min(timed(argv, env) for _ in range(repeat))


def ensure_data_root(data_root: Path, env: dict[str, str]) -> None:
    """A data root with one finished round: `creditline report` reads it, or a tiny round is run into it."""
    if subprocess.run([*creditline(), "report"], env=env, cwd=ROOT, capture_output=True).returncode == 0:
        return
    print(f"making a data root with one tiny round in {data_root} (once)", flush=True)
    run = [*creditline(), "run", "--config", str(ROOT / "tests" / "tiny_experiment.toml"), "--rounds", "1"]
    if subprocess.run(run, env=env, cwd=ROOT, stdout=subprocess.DEVNULL).returncode != 0:
        sys.exit(f"{' '.join(run)} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=None,
                        help=f"a data root with a finished round (default ${DATA_ROOT_ENV}, else {DEFAULT_DATA_ROOT})")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per command; the best is printed")
    args = parser.parse_args()
    data_root = (args.data_root or Path(os.environ.get(DATA_ROOT_ENV) or DEFAULT_DATA_ROOT)).resolve()
    env = environment(data_root)
    ensure_data_root(data_root, env)
    load = os.getloadavg()[0]
    print(f"best of {args.repeat} wall times; {os.cpu_count()} CPUs, load {load:.2f}; data root {data_root}")
    floor, cpu = best([sys.executable, "-c", "pass"], env, args.repeat)
    print(f"{'python -c pass':<20} {floor:6.3f} s  cpu {cpu:6.3f} s")
    runs = {" ".join(["creditline", *command]): [*creditline(), *command] for command in COMMANDS}
    runs["dagster definitions"] = [sys.executable, "-c", "import pipelines.definitions"]
    # what every process that loads a policy imports: transformers' models as creditline.policy.hf imports
    # them (without scikit-learn's metrics), beside the same class imported from transformers directly
    runs["policy imports"] = [sys.executable, "-c", "import creditline.policy.models"]
    runs["transformers model"] = [sys.executable, "-c", "from transformers import LlamaForCausalLM"]
    for name, argv in runs.items():
        wall, cpu = best(argv, env, args.repeat)
        print(f"{name:<20} {wall:6.3f} s  cpu {cpu:6.3f} s  {wall / floor:6.1f}x python -c pass")


if __name__ == "__main__":
    main()
