"""Learning benchmark: rounds to +0.30 held-out success, GiGPO vs GRPO, on the default experiment.

Runs the same core calls as the round assets (rollouts → rubric → advantages → clipped PG update →
greedy evaluation), without Dagster, DuckDB or MLflow, so it measures learning and the core loop's
speed alone. For each seed and estimator it prints the first round whose held-out success exceeds the
initial policy's by 0.30, the success at the last round, and seconds per round; then a side-by-side
summary (GiGPO's rounds to threshold against GRPO's).

    .venv/bin/python bench/learning.py [--seeds 0 1 2] [--rounds 20] [--eval-tasks 100]
    .venv/bin/python bench/learning.py --config examples/chat-maze.toml --seeds 0   # that experiment's estimator
    .venv/bin/python bench/learning.py --config examples/chat-maze.toml --seeds 0 --plot docs/chat-maze.png
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from assets.advantages import advantage_table
from creditline.config import AdvantageSettings, ExperimentConfig, load_config
from creditline.engines import TorchEngine
from creditline.evaluation import evaluate
from creditline.initial_policy import build_initial_policy
from creditline.plots import success_by_round
from creditline.policy import load_policy
from creditline.policy_update import training_rows, update_policy
from creditline.rollout import run_episodes
from creditline.rubrics import get_rubric
from creditline.tasks import training_task_ids

ESTIMATORS = {
    "gigpo": AdvantageSettings(),
    "grpo": AdvantageSettings("grpo", {"norm_by_std": True}),
}


def run(config: ExperimentConfig, rounds: int, eval_tasks: int) -> dict:
    folder, _ = build_initial_policy(config, Path(tempfile.mkdtemp()) / "policy")
    model, tokenizer = load_policy(folder)
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    settings = config.rollouts
    rubric = get_rubric(config.rubric)

    returns: list[float] = []

    def held_out(round_: int) -> float:
        summary = evaluate(engine, tokenizer, config.env.build, config.name, round_, eval_tasks,
                           settings.max_new_tokens, settings.prompt_format, settings.stop)[1]  # fmt: skip
        returns.append(summary.mean_return)
        return summary.success_rate

    initial, curve, optimizer_state = held_out(0), [], None
    start = time.perf_counter()
    for round_ in range(1, rounds + 1):
        tables = run_episodes(
            engine, tokenizer, config.env.build, config.name, round_,
            training_task_ids(config.seed, round_, settings.tasks_per_round), settings.group_size,
            settings.sampling(config.seed),
            settings.prompt_format,
        )  # fmt: skip
        scores = rubric.score(tables.episodes, tables.steps)
        advantages = advantage_table(
            tables.steps, scores, config.advantages.estimator, config.advantages.params
        )
        _, optimizer_state = update_policy(model, tokenizer.pad_token_id, training_rows(tables.steps, advantages),
                                           config, round_, optimizer_state, reference_policy=folder)  # fmt: skip
        curve.append(held_out(round_))
        print(f"  {config.name} seed {config.seed} round {round_}: held-out success {curve[-1]:.2f} "
              f"(initial {initial:.2f}), train success {tables.episodes['success'].mean():.2f}, "
              f"valid {tables.steps['valid_action'].mean():.2f}, {time.perf_counter() - start:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    seconds = (time.perf_counter() - start) / rounds
    first = next((i + 1 for i, s in enumerate(curve) if s >= initial + 0.30), None)
    return {"initial": initial, "curve": curve, "first": first, "seconds": seconds, "returns": returns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--eval-tasks", type=int, default=100)
    parser.add_argument("--config", help="an experiment TOML (default: the default experiment)")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch CPU threads (1 to run two benches side by side)"
    )
    parser.add_argument(
        "--plot", type=Path, help="write each run's held-out curve as PNG: PLOT-<estimator>-s<seed>.png"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = load_config(args.config) if args.config else ExperimentConfig()
    estimators = {base.advantages.estimator: base.advantages} if args.config else ESTIMATORS
    results: dict[tuple[str, int], dict] = {}
    print(f"{'estimator':<8} {'seed':>4} {'initial':>7} {'≥+0.30 at':>9} {'last':>5} {'s/round':>7}  curve")
    for seed in args.seeds:
        for name, advantages in estimators.items():
            config = replace(base, name=f"bench-{name}", seed=seed, advantages=advantages)
            result = results[(name, seed)] = run(config, args.rounds, args.eval_tasks)
            curve = " ".join(f"{s:.2f}" for s in result["curve"])
            print(f"{name:<8} {seed:>4} {result['initial']:>7.2f} {str(result['first']):>9} "
                  f"{result['curve'][-1]:>5.2f} {result['seconds']:>7.1f}  {curve}", flush=True)  # fmt: skip
            if args.plot:
                png = args.plot.with_name(f"{args.plot.stem}-{name}-s{seed}.png")
                png.write_bytes(success_by_round(list(range(args.rounds + 1)), [result["initial"], *result["curve"]],
                                                 result["returns"], f"{base.name}: {name}, seed {seed}, held-out"))  # fmt: skip
            if args.plot:
                png = args.plot.with_name(f"{args.plot.stem}-{name}-s{seed}.png")
                png.write_bytes(success_by_round(list(range(args.rounds + 1)), [result["initial"], *result["curve"]],
                                                 result["returns"], f"{base.name}: {name}, seed {seed}, held-out"))  # fmt: skip
    print("\nrounds to +0.30 (None = not within the run):")
    if estimators is not ESTIMATORS:
        return
    for seed in args.seeds:
        gigpo, grpo = results[("gigpo", seed)]["first"], results[("grpo", seed)]["first"]
        ratio = f"{grpo / gigpo:.2f}×" if gigpo and grpo else "n/a"
        print(f"  seed {seed}: gigpo {gigpo}, grpo {grpo}  (grpo/gigpo = {ratio})")


if __name__ == "__main__":
    main()
