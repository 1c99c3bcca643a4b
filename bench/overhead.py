"""Per-round fixed overhead: a Dagster round of the default experiment against the same round's core work.

Runs `creditline run` in this process, a round at a time (the path `make run` takes: Dagster's in-process
executor, the DuckDB lineage catalog, MLflow, the blocking checks), and after each round replays its core work
with the stage functions the assets call (`creditline.round`: load the parent, generate, score, advantages,
train, save the checkpoint, evaluate), from the same parent checkpoint, and times it. The round, its replay and
a hollow round (below) run back to back, so that the machine's speed, which drifts over minutes on a shared
host, is about the same for the three (run one after the other, the five rounds, then the five replays, then
the hollow rounds, the same code gave 0.53 s to 1.31 s on one afternoon). The Dagster side is read from Dagster's
event log: a round's wall time runs from its run's first event (Dagster plans the run's materialisations
before RUN_START) to RUN_SUCCESS, and each step's from STEP_START to
STEP_SUCCESS. Overhead = Dagster wall − core work; its share of the Dagster wall is the figure.

Round 1 is left out of the share: it also builds the initial policy, evaluates it as the baseline and pays
the process's one-time imports (MLflow alone is ~1.5 s). The replayed checkpoint must hash to the one the
Dagster round recorded (same seed, same code path); the bench says so, or stops.

The bench also runs, beside each measured round, a hollow job of the round job's graph (`hollow_job`: built from the definitions, the same
steps, assets, dependencies, code versions, blocking checks and gpu pool, on the rounds' dynamic partitions,
against an instance configured as `make run`'s) whose bodies do nothing: its wall time is what Dagster's own
run costs here (planning, pool claims, each input's data version looked up, the event log in sqlite), the floor
of the overhead.
What is ours is the rest: `own overhead: X s a round`, the mean over the measured rounds of Dagster wall − core
work − the hollow round's wall (its parts printed beside it), ± the half-width of its 95 % t-interval over those
rounds: one round's figure moves by tenths of a second with the machine's pace, so a mean over 8 rounds is known to
±0.07–0.17 s (2026-11-30), and two codes compared by it must differ by more.

The functions of each part of a round (the core work, the lineage catalog, MLflow, the tables read and written,
their schema checks, hashing, the charts; `round_parts.PARTS`) are timed inside this code's Dagster rounds too, each
outside the others (`round_parts.PartClock`), and printed as a round's mean, with the rest (our step code outside
them, and Dagster's work for our steps beyond the hollow round's). From the core work timed there the bench also
prints `own overhead, the core work timed inside the round`: the same difference, where the core work is the
round's own rather than its replay's (the training inside the round has run 0.1-0.3 s slower than its replay,
docs/benchmarks.md; that figure counts it as core work).

`--before REV` also runs the same rounds with the code of git revision REV (checked out in a temporary
worktree, run in its own process, its own data root) and prints its overhead beside this code's, against the
same core replay: REV's checkpoints must hash to this code's, so both sides did the same work. REV's rounds
run first, all of them, so the drift above is not taken out of that side's figures.

    .venv/bin/python bench/overhead.py [--rounds 5] [--data-root DIR] [--before REV]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from round_parts import CORE, PARTS, PartClock  # noqa: E402

from creditline.comparison import mean_ci  # noqa: E402
from creditline.config import ExperimentConfig  # noqa: E402
from creditline.credit.round_advantages import step_advantages  # noqa: E402
from creditline.engines import TorchEngine  # noqa: E402
from creditline.policy.models import load_optimizer_state, load_policy, save_policy  # noqa: E402
from creditline.round import evaluate_policy, generate_rollouts, score_rollouts, train_policy  # noqa: E402
from creditline.store import LineageStore, hash_path  # noqa: E402
from pipelines.garbage_collection import rounds_pace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
THIS = "this code"
"""The side of the comparison that runs this checkout's code (the other is `--before REV`)."""


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


def rounds_at_revision(revision: str, root: Path, rounds: int) -> None:
    """`creditline run --rounds N` with the code of git `revision`, in a temporary worktree and its own process.

    The worktree goes first on PYTHONPATH, so its packages shadow this checkout's editable install.
    """
    worktree = Path(tempfile.mkdtemp(prefix="creditline-before-")) / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(worktree), revision], cwd=REPO, check=True
    )
    try:
        cli = "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
        subprocess.run([sys.executable, "-c", cli, "run", "--data-root", str(root), "--rounds", str(rounds)],
                       cwd=worktree, env={**os.environ, "PYTHONPATH": str(worktree)}, check=True)  # fmt: skip
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=True)


def recorded_round(root: Path, name: str, round_: int) -> tuple[float, dict[str, float], str, str]:
    """A recorded round under `root`: (Dagster wall s, {step: s}, checkpoint hash, parent checkpoint path)."""
    from pipelines.instance import get_instance

    store = LineageStore(root / "lineage.duckdb")
    recorded = store.artifact(name, round_, "checkpoint")
    parent = store.artifact(name, round_ - 1, "checkpoint")
    wall, steps = dagster_round(get_instance(str(root)), recorded.dagster_run_id)
    return wall, steps, recorded.content_hash, parent.path


def hollow_job(data_root: str):
    """The round job's graph as Dagster sees it, with bodies that do nothing: the same assets (the rollouts'
    two outputs from one step), each with the same dependencies, code version, partitions and pool, and the
    same blocking checks. Each asset reports a data version, as the round's do; no resource is needed."""
    import dagster as dg

    from pipelines.definitions import ROUND_JOB, make_definitions

    real = make_definitions(data_root)
    in_round = real.resolve_job_def(ROUND_JOB).asset_layer.asset_graph
    assets = [
        _hollow_asset(d)
        for d in real.assets
        if any(key in in_round.materializable_asset_keys for key in d.keys)
    ]
    checks = [_hollow_check(spec, d.partitions_def)
              for d in real.asset_checks for spec in d.check_specs if spec.key in in_round.asset_check_keys]  # fmt: skip
    job = dg.define_asset_job("hollow_round", selection="*")
    return dg.Definitions(assets=assets, asset_checks=checks, jobs=[job]).resolve_job_def("hollow_round")


def _hollow_asset(real):
    import dagster as dg

    specs = list(real.specs)

    @dg.multi_asset(name=real.op.name, specs=specs, pool=real.op.pool)
    def hollow():
        for spec in specs:
            yield dg.MaterializeResult(
                asset_key=spec.key, data_version=dg.DataVersion("0" * 12), metadata={"rows": 0}
            )

    return hollow


def _hollow_check(spec, partitions):
    import dagster as dg

    @dg.asset_check(asset=spec.asset_key, name=spec.name, blocking=spec.blocking, partitions_def=partitions)
    def hollow():
        return dg.AssetCheckResult(passed=True)

    return hollow


class HollowRounds:
    """Runs of the hollow round job (`hollow_job`) under `root`, one at a time (`next_wall`), at the collector's
    pace of the rounds (`rounds_pace`). The first run, which pays the instance's storage set-up, is made and
    left out when it is built."""

    def __init__(self, root: Path):
        from pipelines.instance import get_instance

        self.job = hollow_job(str(root))
        self.instance = get_instance(str(root))
        self.runs = 0
        self.next_wall()

    def next_wall(self) -> float:
        """Wall seconds (from the event log) of one more hollow round."""
        from assets.partitions import ROUNDS

        self.runs += 1
        key = f"hollow.r{self.runs:03d}"
        self.instance.add_dynamic_partitions(ROUNDS.name, [key])
        quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
        with rounds_pace():  # the collector's pace the rounds run at (`execute_partition`)
            result = self.job.execute_in_process(instance=self.instance, partition_key=key, run_config=quiet)
        return dagster_round(self.instance, result.run_id)[0]


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
    advantages = step_advantages(tables.steps, scores, config.advantages, tables.episodes)
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
    parser.add_argument(
        "--before", metavar="REV", help="also run the rounds with the code of git revision REV"
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 is not counted)")
    torch.set_num_threads(2)
    root = (args.data_root or Path(tempfile.mkdtemp(prefix="creditline-overhead-"))).resolve()
    sides = {THIS: root}
    if args.before:
        sides[args.before] = root.with_name(root.name + "-before")
        rounds_at_revision(args.before, sides[args.before], args.rounds)

    from pipelines.cli import main as creditline

    config = ExperimentConfig()
    shares: dict[str, list[float]] = {side: [] for side in sides}
    overheads: dict[str, list[float]] = {side: [] for side in sides}  # Dagster wall − core work, a round
    walls: list[float] = []  # this code's Dagster rounds
    cores: list[float] = []
    inside: list[float] = []  # this code's core work timed inside its Dagster rounds
    floor: list[float] = []  # the hollow rounds, one beside each measured round
    table: list[str] = []
    if creditline(["run", "--data-root", str(root), "--rounds", "1"]) != 0:
        raise SystemExit("creditline run failed")
    hollow = HollowRounds(root.with_name(root.name + "-hollow"))
    clock = PartClock(gate="pipelines.round_runner:execute_partition")  # inside this code's Dagster rounds
    with clock.installed():
        for round_ in range(2, args.rounds + 1):
            # each round, its replay and a hollow round back to back: the machine's speed drifts over minutes
            timed_before = clock.seconds[CORE]
            if creditline(["run", "--data-root", str(root), "--rounds", str(round_)]) != 0:
                raise SystemExit("creditline run failed")
            inside.append(clock.seconds[CORE] - timed_before)
            recorded = {side: recorded_round(folder, config.name, round_) for side, folder in sides.items()}
            with tempfile.TemporaryDirectory() as scratch, rounds_pace():  # the pace a round collects at
                parent = recorded[THIS][3]
                core, stages, digest = core_round(config, parent, round_, Path(scratch) / "policy")
            floor.append(hollow.next_wall())
            for side, (wall, steps, checkpoint, _) in recorded.items():
                if digest != checkpoint:
                    print("\n".join(table))  # the rounds measured so far
                    raise SystemExit(f"round {round_}: the core replay's checkpoint {digest[:12]} is not {side}'s "
                                     f"{checkpoint[:12]}: the bench would not measure the same work")  # fmt: skip
                shares[side].append((wall - core) / wall)
                overheads[side].append(wall - core)
                where = ", ".join(f"{k} {v:.2f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]))
                table.append(f"{round_:>5} {side[:10]:>10} {wall:>9.2f} {core:>7.2f} {wall - core:>10.2f} "
                             f"{shares[side][-1]:>6.1%} {floor[-1]:>7.2f}   {where}")  # fmt: skip
            table.append(f"{'':>56}core: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
            walls.append(recorded[THIS][0])
            cores.append(core)
    print(f"\n{'round':>5} {'code':>10} {'dagster s':>9} {'core s':>7} {'overhead s':>10} {'share':>6} {'hollow':>7}   "
          "where the Dagster run went")  # fmt: skip
    print("\n".join(table))
    print(f"\nreplayed checkpoints hash to every side's Dagster rounds ({args.rounds - 1} rounds)")
    for side, values in shares.items():
        print(f"{side}: overhead share: {100 * statistics.mean(values):.0f} % (rounds 2..{args.rounds}, "
              f"median {100 * statistics.median(values):.0f} %; data root {sides[side]})")  # fmt: skip
    print(f"Dagster's own floor: a hollow round of the same graph takes {statistics.median(floor):.2f} s (median of "
          f"{len(floor)}), {100 * statistics.median(floor) / statistics.median(walls):.0f} % of this code's median "
          f"round ({statistics.median(walls):.2f} s)")  # fmt: skip
    hollow_mean, core_mean = statistics.mean(floor), statistics.mean(cores)
    for side, values in overheads.items():  # ours: what a round costs beyond its work and Dagster's own run
        label = "" if side == THIS else f" ({side})"
        own, spread = mean_ci([overhead - hollow for overhead, hollow in zip(values, floor, strict=True)])
        print(f"own overhead{label}: {own:.2f} s a round (± {spread:.2f}, the 95 % t-interval over rounds "
              f"2..{args.rounds}, each less its replay and the hollow round beside it; means: Dagster wall "
              f"{statistics.mean(values) + core_mean:.2f} s − core work {core_mean:.2f} s − hollow round {hollow_mean:.2f} s)")  # fmt: skip
    own_inside = [wall - core - hollow for wall, core, hollow in zip(walls, inside, floor, strict=True)]
    print_parts(clock, args.rounds - 1, statistics.mean(walls), hollow_mean, core_mean, own_inside)


def print_parts(
    clock: PartClock, rounds: int, wall: float, hollow: float, replayed: float, own_inside: list[float]
) -> None:
    """The parts' seconds a round inside this code's Dagster rounds, and the own overhead with the core work
    timed there rather than replayed (`own_inside`: a round's, each)."""
    inside = clock.seconds[CORE] / rounds
    own, spread = mean_ci(own_inside)
    print(f"own overhead, the core work timed inside the round: {own:.2f} s a round (± {spread:.2f}, the same "
          f"way; means: Dagster wall {wall:.2f} s − core work {inside:.2f} s − hollow round {hollow:.2f} s; the core "
          f"replayed: {replayed:.2f} s)")  # fmt: skip
    print("  inside the round: " + ", ".join(f"{target.split(':')[1]} {clock.functions[target] / rounds:.2f}"
                                         for target in PARTS[CORE]))  # fmt: skip
    print("where the round's time went, each part outside the others (a round's mean: seconds, calls):")
    for part, seconds in sorted(clock.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {part:<16} {seconds / rounds:6.3f} s  {clock.calls[part] / rounds:5.1f}")
    rest = wall - sum(clock.seconds.values()) / rounds - hollow
    print(f"  {'the rest':<16} {rest:6.3f} s         (our step code outside these parts, and Dagster's work for our "
          "steps beyond the hollow round's)")  # fmt: skip


if __name__ == "__main__":
    main()
