"""Per-round fixed overhead: a Dagster round of the default experiment against the same round's core work.

Runs `creditline run` in this process (the path `make run` takes: Dagster's in-process executor, the DuckDB
lineage catalog, MLflow, the blocking checks), then replays each round's core work with the stage functions
the assets call (`creditline.round`: load the parent, generate, score, advantages, train, save the
checkpoint, evaluate), from the same parent checkpoint, and times it. The Dagster side is read from Dagster's
event log: a round's wall time runs from its run's first event (Dagster plans the run's materialisations
before RUN_START) to RUN_SUCCESS, and each step's from STEP_START to
STEP_SUCCESS. Overhead = Dagster wall − core work; its share of the Dagster wall is the figure.

Round 1 is left out of the share: it also builds the initial policy, evaluates it as the baseline and pays
the process's one-time imports (MLflow alone is ~1.5 s). The replayed checkpoint must hash to the one the
Dagster round recorded (same seed, same code path); the bench says so, or stops.

    .venv/bin/python bench/overhead.py [--rounds 5] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.config import ExperimentConfig  # noqa: E402
from creditline.engines import TorchEngine  # noqa: E402
from creditline.policy import load_optimizer_state, load_policy, save_policy  # noqa: E402
from creditline.round import (  # noqa: E402
    evaluate_policy,
    generate_rollouts,
    score_rollouts,
    step_advantages,
    train_policy,
)
from creditline.store import LineageStore, hash_path  # noqa: E402


def dagster_round(instance, run_id: str) -> tuple[float, dict[str, float]]:
    """(run wall seconds, {step key: seconds}) from the run's event log."""
    start = end = None
    steps: dict[str, float] = {}
    opened: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type_value
        if start is None:  # the first event: Dagster plans the run's materialisations before RUN_START
            start = entry.timestamp
        if kind == "PIPELINE_SUCCESS":  # RUN_SUCCESS
            end = entry.timestamp
        elif kind == "STEP_START":
            opened[event.step_key] = entry.timestamp
        elif kind == "STEP_SUCCESS":
            steps[event.step_key] = entry.timestamp - opened[event.step_key]
    if start is None or end is None:
        raise RuntimeError(f"run {run_id}: no start/success events in its log")
    return end - start, steps


def core_round(
    config: ExperimentConfig, parent: str, round_: int, out: Path
) -> tuple[float, dict[str, float], str]:
    """The round's core work from `parent`, timed per stage; (seconds, {stage: seconds}, checkpoint hash)."""
    times: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[stage] = now - clock
        clock = now

    model, tokenizer = load_policy(parent)
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    lap("load parent")
    tables = generate_rollouts(engine, tokenizer, config, round_)
    lap("generate")
    scores = score_rollouts(config, tables.episodes, tables.steps)
    lap("score")
    advantages = step_advantages(tables.steps, scores, config.advantages)
    lap("advantages")
    _, optimizer_state = train_policy(model, tokenizer, tables.steps, advantages, config, round_,
                                      load_optimizer_state(parent))  # fmt: skip
    lap("train")
    folder = save_policy(model, tokenizer, out, optimizer_state)
    lap("save checkpoint")
    evaluate_policy(engine, tokenizer, config, round_)
    lap("evaluate")
    return sum(times.values()), times, hash_path(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds to run (round 1 is not counted)")
    parser.add_argument("--data-root", type=Path, help="default: a fresh temporary folder")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 is not counted)")
    torch.set_num_threads(2)
    root = (args.data_root or Path(tempfile.mkdtemp(prefix="creditline-overhead-"))).resolve()

    from pipelines.cli import main as creditline
    from pipelines.instance import get_instance

    if creditline(["run", "--data-root", str(root), "--rounds", str(args.rounds)]) != 0:
        raise SystemExit("creditline run failed")
    config = ExperimentConfig()
    store = LineageStore(root / "lineage.duckdb")
    instance = get_instance(str(root))
    shares = []
    print(
        f"\n{'round':>5} {'dagster s':>9} {'core s':>7} {'overhead s':>10} {'share':>6}   where the Dagster run went"
    )
    for round_ in range(2, args.rounds + 1):
        recorded = store.artifact(config.name, round_, "checkpoint")
        parent = store.artifact(config.name, round_ - 1, "checkpoint")
        wall, steps = dagster_round(instance, recorded.dagster_run_id)
        with tempfile.TemporaryDirectory() as scratch:
            core, stages, digest = core_round(config, parent.path, round_, Path(scratch) / "policy")
        if digest != recorded.content_hash:
            raise SystemExit(f"round {round_}: the core replay's checkpoint {digest[:12]} is not the Dagster round's "
                             f"{recorded.content_hash[:12]}: the bench would not measure the same work")  # fmt: skip
        shares.append((wall - core) / wall)
        where = ", ".join(f"{k} {v:.2f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]))
        print(f"{round_:>5} {wall:>9.2f} {core:>7.2f} {wall - core:>10.2f} {shares[-1]:>6.1%}   {where}")
        print(f"{'':>37}core: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    print(f"\nreplayed checkpoints hash to the Dagster rounds' ({args.rounds - 1} of {args.rounds - 1})")
    print(f"overhead share: {100 * statistics.mean(shares):.0f} % "
          f"(rounds 2..{args.rounds}, median {100 * statistics.median(shares):.0f} %; data root {root})")  # fmt: skip


if __name__ == "__main__":
    main()
