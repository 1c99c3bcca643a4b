"""The learning table: does step-level credit pay off? Every estimator, several seeds, four tasks, equal budget.

Each run is an experiment of `creditline compare`: the tasks' runs are played by the CLI's own
`compare_members`, each (estimator, seed) an experiment of Dagster rounds, as `make run` plays them (with
lineage in DuckDB and runs in MLflow), from the same initial policy, for the same number of rounds, tasks per
round and samples per task: every estimator gets the same rollout budget (episodes; the sampled tokens are
counted too, since episodes differ in length, and a branching estimator's continuations count as episodes).
Held-out greedy success is measured before round 1 and after every round. The data root is a temporary one,
removed at the end, unless `--data-root` keeps it (then `creditline report`, `lineage` and the UIs read it).

Tasks (`TASKS`):
    shaped-maze   the default experiment: 5×5 key-and-door maze, progress shaping 0.1 (per-step signal)
    sparse-maze   the same maze, success reward only (the case step-level credit is meant for); an invalid
                  completion still costs 0.1

    long-maze     7×7, 28 steps, shaped: a longer horizon, where more states recur across a group
    single-turn   arithmetic, one step per episode: every estimator's groups are the trajectory groups,
                  so step-level grouping should change nothing (the control)

Diagnoses of the sparse maze (`DIAGNOSES`, opt-in with `--tasks`): without the invalid-completion cost (an
all-fail group's returns are then all equal), 40 rounds instead of 20, groups of 16 samples (32 tasks a round).

The credit dial (`DIAL_TASKS`, opt-in with `--tasks`): the `credit_dial` environment swept one dial at a time
around `dial-h8-d2` (8 turns, 2 decisive, one state per decisive turn, success-only reward): `dial-h8-d1`,
`dial-h8-d4`, `dial-h4-d2`, `dial-h16-d2`, `dial-h8-d2-s4`, `dial-h8-d2-s20`, `dial-h8-d2-shaped`, and under the
digit rule (the cue a digit whose answer word is learnt) `dial-h8-d2-digit`, `dial-h8-d4-digit`, and the same
with each mistake shown in the later turns, `dial-h8-d2-digit-shown`, `dial-h8-d4-digit-shown`.

Output in `--out` (default bench/results/): `learning.md` (per task and estimator: final success mean ± 95 %
CI over seeds, rounds to +0.30 over the initial policy, wall time, episodes and tokens used), `learning.png`
(success by round, mean and 95 % CI band per estimator, a panel per task) and `runs/*.json`, one file per
(task, estimator, seed) run, filed as the run ends and written atomically (a killed sweep leaves each file whole
or absent, and the next run removes the temporary file a killed write left): a finished run is not repeated
when the command is run again (delete its file to redo it), so the table can be filled over several sittings.

    .venv/bin/python bench/learning.py                       # the full table (hours on 2 CPU cores)
    .venv/bin/python bench/learning.py --tasks sparse-maze --estimators grpo gigpo --seeds 0 1 2 3 4
    .venv/bin/python bench/learning.py --tasks dial-h8-d2 dial-h8-d2-s20 --estimators grpo rloo gigpo hgpo
    .venv/bin/python bench/learning.py --quick --out /tmp/learning   # a smoke run (the test suite's)
    .venv/bin/python bench/learning.py --config examples/chat-maze.toml --estimators gigpo --seeds 0
    .venv/bin/python bench/learning.py --report                      # the table and plot of the runs on file
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.comparison import plot, table  # noqa: E402
from creditline.config import AdvantageSettings, ExperimentConfig, from_dict, load_config  # noqa: E402
from creditline.config.checks import ConfigError  # noqa: E402
from creditline.credit.advantages import available  # noqa: E402
from creditline.store import config_hash, remove_orphans, write_bytes_atomic  # noqa: E402
from pipelines.cli import compare_members, prepare  # noqa: E402

DEFAULT = ExperimentConfig().to_dict()
MAZE = DEFAULT["env"]["params"]
TASKS: dict[str, dict] = {
    "shaped-maze": {"rounds": 15},
    "sparse-maze": {"rounds": 20, "env": {"name": "maze", "params": {**MAZE, "progress_reward": 0.0}}},
    "long-maze": {"rounds": 20, "env": {"name": "maze", "params": {**MAZE, "size": 7, "max_steps": 28}}},
    "single-turn": {"rounds": 15, "env": {"name": "arithmetic", "params": {"max_operand": 4}}},
    "lookup": {"rounds": 60, "env": {"name": "lookup", "params": {}}},
}
"""Each task's overrides of the default experiment."""
DIAL_MIDDLE = {"horizon": 8, "decisive": 2, "distinct_states": 1, "shaped_share": 0.0, "choices": 2}
"""The credit dial's middle setting (`creditline.envs.credit_dial`): 8 turns of which 2 matter, each decisive
turn showing one state to the whole group, success-only reward, two action words (random success 1/4)."""


def dial_task(**dials) -> dict:
    """A credit-dial task: the middle setting with `dials` changed, 20 rounds, and a warm start on random
    action words so that the policy starts at the documented random success, (1/choices)^decisive."""
    return {
        "rounds": 20,
        "env": {"name": "credit_dial", "params": {**DIAL_MIDDLE, **dials}},
        "warm_start": {**DEFAULT["warm_start"], "episodes": 64},
    }


DIAL_TASKS: dict[str, dict] = {
    "dial-h8-d2": dial_task(),
    "dial-h8-d1": dial_task(decisive=1),
    "dial-h8-d4": dial_task(decisive=4),
    "dial-h4-d2": dial_task(horizon=4),
    "dial-h16-d2": dial_task(horizon=16),
    "dial-h8-d2-s4": dial_task(distinct_states=4),
    "dial-h8-d2-s20": dial_task(distinct_states=20),
    "dial-h8-d2-shaped": dial_task(shaped_share=0.5),
    "dial-h8-d2-digit": dial_task(rule="digit"),
    "dial-h8-d4-digit": dial_task(decisive=4, rule="digit"),
    "dial-h8-d2-digit-shown": dial_task(rule="digit", mistakes_shown=True),
    "dial-h8-d4-digit-shown": dial_task(decisive=4, rule="digit", mistakes_shown=True),
}
"""The credit dial swept one dial at a time around `dial-h8-d2` (opt-in, `--tasks`): decisive turns (d1, d4),
horizon and so filler turns (h4, h16), distinct states per decisive turn, i.e. how rarely anchors recur across
a group of 8 (s4: about 2 episodes an anchor group; s20: mostly singletons, where GiGPO's step term is 0),
half of the reward paid per correct decisive step (shaped), and the digit rule (digit): the cue is a digit whose
answer word must be learnt, not a word to copy, so each decisive turn needs credit of its own; with the mistakes
shown (shown: after a wrong answer every later turn shows `go none`), a decisive state's anchor group holds only
the episodes still on track."""
SPARSE = {"name": "maze", "params": {**MAZE, "progress_reward": 0.0}}
DIAGNOSES: dict[str, dict] = {
    "sparse-no-penalty": {
        "rounds": 20,
        "env": {**SPARSE, "params": {**SPARSE["params"], "invalid_penalty": 0.0}},
    },
    "sparse-40-rounds": {"rounds": 40, "env": SPARSE},
    "sparse-groups-of-16": {
        "rounds": 20,
        "env": SPARSE,
        "rollouts": {"tasks_per_round": 32, "group_size": 16},
    },
}
"""Why the sparse maze learns so little (opt-in, `--tasks`): one change each, at the same budget per round."""
ESTIMATORS: dict[str, AdvantageSettings] = {
    **{name: AdvantageSettings(name, {}) for name in available()},
    "grpo": AdvantageSettings("grpo", {"norm_by_std": True}),  # as published: normalised by the group's std
    "dr_grpo": AdvantageSettings("grpo", {"norm_by_std": False}),  # Dr.GRPO: r − μ_g, no std
    "gigpo_mean_norm": AdvantageSettings("gigpo", {"mode": "mean_norm"}),  # GiGPO without dividing by σ
    "grpo_prof": AdvantageSettings(
        "grpo", {"norm_by_std": True}, sample_filter="prof"
    ),  # PROF: 4 of 8 dropped
}
"""The table's rows: every registered estimator with its defaults, and named variants (opt-in)."""
VARIANTS = ("dr_grpo", "gigpo_mean_norm")
BRANCHED: dict[str, dict] = {
    name: {
        "branching": {"points": "entropy", "per_episode": 2, "continuations": 2, "token_budget": 4096},
        "rollouts": {"tasks_per_round": 32},
    }
    for name in ("mc_branch", "spo_tree")
}
"""Estimators that learn from continuations: half the tasks per round, and the other half's most tokens
(32 tasks × 8 samples × 16 one-token steps = 4,096) as the continuations' budget, so a round samples at most
the tokens of the others' (compare the table's tokens column too)."""
OWN_SECTIONS: dict[str, dict] = {"spa": {"reward_model": {"epochs": 16}}}
"""Estimators' own settings beside the advantages: SPA's progress model is fit 16 passes a round (at the shared
default of 1 it underfits and SPA learns little; docs/advantages.md, "SPA and PROF: what was wrong")."""
ADDED_SINCE_RUNS = (
    ("branching", None),
    ("advantages", "sample_filter"),
    ("advantages", "filter_remove"),
    ("reward_model", None),
    ("rollouts", "dtype"),
    ("eval", "verifiers"),
    ("verifiers", "select"),
)
"""Config sections (None: the whole section) and fields added after runs on file were played: left out of a
run's key while at their defaults, so those runs still count (as a registered config reads back,
`creditline.config`)."""
QUICK = {"rounds": 2, "rollouts": {"tasks_per_round": 4, "group_size": 4}, "eval": {"num_tasks": 8}}


def task_config(
    task: str, estimator: str, seed: int, quick: bool, base: dict | None = None
) -> ExperimentConfig:
    """The experiment a run plays: the default (or `base`, a user's config) with the task's overrides, the
    estimator and the seed."""
    base = base or DEFAULT
    overrides = dict({**TASKS, **DIAGNOSES, **DIAL_TASKS}.get(task, {}))
    if quick:
        overrides = {**overrides, **QUICK}
    branched = BRANCHED.get(estimator, {})
    merged = {**base, **overrides, "name": f"bench-{task}-{estimator}".replace("_", "-"), "seed": seed}
    merged["rollouts"] = {**base["rollouts"], **overrides.get("rollouts", {}), **branched.get("rollouts", {})}
    merged["eval"] = {**base["eval"], **overrides.get("eval", {})}
    merged["branching"] = {**base.get("branching", {}), **branched.get("branching", {})}
    merged["warm_start"] = {**base["warm_start"], **overrides.get("warm_start", {})}
    merged["advantages"] = asdict(ESTIMATORS[estimator])
    for section, values in OWN_SECTIONS.get(estimator, {}).items():
        merged[section] = {**base[section], **values}
    return from_dict(merged)


def run_key(config: ExperimentConfig) -> str:
    """The hash a run is filed under: the config's, without the sections added since at their defaults."""
    data, default = config.to_dict(), ExperimentConfig().to_dict()
    for section, name in ADDED_SINCE_RUNS:
        if name is None and data[section] == default[section]:
            del data[section]
        elif name is not None and data[section][name] == default[section][name]:
            data[section] = {k: v for k, v in data[section].items() if k != name}
    return config_hash(data)


def member_name(task: str, estimator: str, seed: int) -> str:
    """The experiment a run is played as in the data root (one per task, estimator and seed)."""
    return f"bench-{task}-{estimator}-s{seed}".replace("_", "-")


def play(args, task: str, configs: dict[tuple[str, int], ExperimentConfig], filed) -> None:
    """Play one task's runs ((estimator, seed) → config) as `creditline compare` plays its members, each run
    an experiment of Dagster rounds with its lineage and MLflow runs in the data root, under the comparison
    `bench-<task>`; `filed((estimator, seed), result)` as each run ends (its result: `creditline.comparison`).
    Exits with the round's exit code if one fails."""
    members = {key: replace(config, name=member_name(task, *key)) for key, config in configs.items()}
    if failed := compare_members(args, f"bench-{task}", members, filed):
        sys.exit(failed)


def run_file(out: Path, task: str, estimator: str, seed: int) -> Path:
    """Where a run's result is filed: `<out>/runs/<task>-<estimator>-s<seed>.json`."""
    return out / "runs" / f"{task}-{estimator}-s{seed}.json"


def read_run(path: Path) -> dict:
    """A filed run's result; one line naming the file when it is not one (a run file is written atomically, so
    only an edit or another program leaves it so)."""
    try:
        result = json.loads(path.read_text())
        if isinstance(result, dict) and "config_hash" in result:
            return result
        problem = "no config_hash"
    except (ValueError, UnicodeDecodeError) as exc:
        problem = str(exc)
    sys.exit(f"{path}: not a filed run ({problem}); delete it to play the run again")


def runs_to_play(args, task: str, seeds: list[int], base: dict | None, results: dict) -> dict:
    """(estimator, seed) → config of the task's runs not on file (none with `--report`); the runs on file
    (their config hash unchanged) go into `results`."""
    to_play: dict[tuple[str, int], ExperimentConfig] = {}
    for seed in seeds:
        for estimator in args.estimators:
            try:
                config = task_config(task, estimator, seed, args.quick, base)
            except ConfigError as exc:  # e.g. IGPO on a task without a gold answer
                if seed == seeds[0]:
                    print(f"{task:<12} {estimator:<22} not applicable: {exc.problems[0]}", flush=True)
                continue
            saved = run_file(args.out, task, estimator, seed)
            if saved.exists() and (old := read_run(saved))["config_hash"] == run_key(config):
                results[(task, estimator, seed)] = old
            elif not args.report:
                to_play[(estimator, seed)] = config
    return to_play


def filer(out: Path, task: str, configs: dict, results: dict):
    """What files a run of `task` as it ends: `runs/<task>-<estimator>-s<seed>.json` under its config hash,
    into `results` too, and a line."""

    def file_run(key: tuple[str, int], result: dict) -> None:
        estimator, seed = key
        result = results[(task, estimator, seed)] = {"config_hash": run_key(configs[key]), **result}
        write_bytes_atomic(
            (json.dumps(result, indent=1) + "\n").encode(), run_file(out, task, estimator, seed)
        )
        print(f"{task:<12} {estimator:<22} seed {seed}: success {result['success'][0]:.2f} → "
              f"{result['success'][-1]:.2f}, {result['seconds']:.0f} s", flush=True)  # fmt: skip

    return file_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=[*TASKS, *DIAGNOSES, *DIAL_TASKS],
                        help=f"default: {', '.join(TASKS)} (with --report: every task on file); "
                             f"diagnoses of the sparse maze: {', '.join(DIAGNOSES)}; "
                             f"the credit dial: {', '.join(DIAL_TASKS)}")  # fmt: skip
    parser.add_argument("--estimators", nargs="+", choices=list(ESTIMATORS),
                        default=[e for e in ESTIMATORS if e not in VARIANTS],
                        help=f"default: every registered estimator; variants: {', '.join(VARIANTS)}")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--quick", action="store_true", help="2 rounds of 4 tasks × 4 samples, 1 seed: a smoke run"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--config", type=Path, help="an experiment TOML: its own task, named after the file")
    parser.add_argument(
        "--report", action="store_true", help="only tabulate and plot the runs on file (play none)"
    )
    parser.add_argument("--data-root", type=Path, help="keep the runs' data root (lineage, Dagster runs, "
                        "MLflow) here; default: a temporary one, removed at the end")  # fmt: skip
    args = parser.parse_args()
    bases = {args.config.stem: load_config(args.config).to_dict()} if args.config else {}
    on_file = (*DIAGNOSES, *DIAL_TASKS) if args.report else ()
    tasks = list(bases) if args.config else args.tasks or [*TASKS, *on_file]
    torch.set_num_threads(args.threads)
    seeds = args.seeds[:1] if args.quick else args.seeds
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    for orphan in remove_orphans(args.out):  # what a sweep killed while filing a run left: its temporary file
        print(f"removed {orphan.path} ({orphan.reason})", flush=True)
    data_root = args.data_root or Path(tempfile.mkdtemp(prefix="creditline-learning-"))
    cli_args = prepare(["--data-root", str(data_root), "compare", "--estimators", ",".join(args.estimators),
                        "--quiet"])  # fmt: skip
    results: dict[tuple[str, str, int], dict] = {}
    try:
        for task in tasks:
            to_play = runs_to_play(args, task, seeds, bases.get(task), results)
            if to_play:
                play(cli_args, task, to_play, filer(args.out, task, to_play, results))
    finally:  # an interrupted sweep leaves no temporary data root behind
        if not args.data_root:
            shutil.rmtree(data_root, ignore_errors=True)
    markdown = table(results)
    write_bytes_atomic(markdown.encode(), args.out / "learning.md")
    write_bytes_atomic(plot(results, list(ESTIMATORS)), args.out / "learning.png")
    print("\n" + markdown + f"\nwritten: {args.out / 'learning.md'}, {args.out / 'learning.png'}")


if __name__ == "__main__":
    main()
