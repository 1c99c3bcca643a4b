"""`creditline`: run rounds through Dagster, report, audit lineage, compute advantages from a file.

    creditline run [--experiment NAME] [--rounds N] [--config FILE]
    creditline report [--experiment NAME] [--json]
    creditline lineage [--experiment NAME] [--round R] [--json]
    creditline verify [--experiment NAME]
    creditline register [--experiment NAME] [--config FILE]
    creditline rescore [--experiment NAME] --rubric NAME|VERSION [--rounds A..B]
    creditline advantages --estimator NAME [--param k=v ...] --steps IN.parquet [--scores S.parquet] --out OUT.parquet

Every command takes `--data-root` (default `$CREDITLINE_DATA_ROOT`, else `./creditline-data`).
`--experiment` defaults to the default experiment's name, `--round` to the newest round.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

from creditline.config import ExperimentConfig, load_config
from creditline.store import ExperimentConfigMismatch, LineageStore
from resources.lineage import DATA_ROOT_ENV, LineageResource, default_data_root

DEFAULT_EXPERIMENT = ExperimentConfig().name


def _store(data_root: str) -> LineageStore:
    return LineageResource(data_root=data_root).store()


def _register(args) -> tuple[ExperimentConfig, str] | None:
    """Register the experiment `--config`/`--experiment` describe; None (after saying why) on a mismatch."""
    config = load_config(args.config, name=args.experiment)
    try:
        return config, _store(args.data_root).register_experiment(config.name, config.to_dict())
    except ExperimentConfigMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


@functools.lru_cache(maxsize=4)
def _job(data_root: str, job_name: str):
    from pipelines.definitions import make_definitions

    return make_definitions(data_root).resolve_job_def(job_name)


def _execute(instance, data_root: str, job_name: str, partition_key, tags: dict[str, str] | None = None):
    """Run one partition of a job in this process against the persistent instance, logging warnings only."""
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    return _job(data_root, job_name).execute_in_process(
        instance=instance,
        partition_key=partition_key,
        run_config=quiet,
        raise_on_error=False,
        tags=tags or {},
    )


def cmd_run(args) -> int:
    from assets.partitions import ROUNDS, round_key
    from pipelines.definitions import ROUND_JOB
    from pipelines.instance import get_instance
    from pipelines.sensors import EXPERIMENT_TAG

    registered = _register(args)
    if registered is None:
        return 2
    config, store = registered[0], _store(args.data_root)
    rounds = args.rounds or config.rounds
    instance = get_instance(args.data_root)
    done = {e.round for e in store.evaluations(config.name)}
    print(f"experiment {config.name}: {rounds} rounds, data root {args.data_root}")
    for round_ in range(1, rounds + 1):
        if round_ in done:
            continue
        key = round_key(config.name, round_)
        if not instance.has_dynamic_partition(ROUNDS.name, key):
            instance.add_dynamic_partitions(ROUNDS.name, [key])
        start = time.perf_counter()
        result = _execute(instance, args.data_root, ROUND_JOB, key, tags={EXPERIMENT_TAG: config.name})
        if not result.success:
            failures = [e.message for e in result.all_events if e.is_failure]
            print(
                f"round {round_} failed (dagster run {result.run_id}):\n  " + "\n  ".join(failures),
                file=sys.stderr,
            )
            return 1
        latest = {e.round: e for e in store.evaluations(config.name)}
        print(f"round {round_:>3}/{rounds}  success {latest[round_].success_rate:.2f}  "
              f"(initial {latest[0].success_rate:.2f})  return {latest[round_].mean_return:+.2f}  "
              f"{time.perf_counter() - start:5.1f} s", flush=True)  # fmt: skip
    _print_report(store.evaluations(config.name))
    return 0


def cmd_register(args) -> int:
    """Register an experiment without running it: the round sensor (Dagster UI) will advance it."""
    registered = _register(args)
    if registered is None:
        return 2
    config, digest = registered
    print(
        f"registered {config.name} (config {digest}, {config.rounds} rounds); turn on round_sensor to run it"
    )
    return 0


def _parse_rounds(text: str | None, available: list[int]) -> list[int]:
    if not text:
        return available
    first, sep, last = text.partition("..")
    wanted = range(int(first), int(last if sep else first) + 1)
    missing = [r for r in wanted if r not in available]
    if missing:
        raise ValueError(f"rounds {missing} have no rollouts recorded (available: {available})")
    return list(wanted)


def cmd_rescore(args) -> int:
    """Backfill the re-score branch for one rubric version over some rounds."""
    import dagster as dg

    from assets.partitions import round_key
    from creditline.rubrics import RUBRICS, rubric_by_version
    from pipelines import dagster_client
    from pipelines.definitions import RESCORE_JOB
    from pipelines.instance import get_instance

    store = _store(args.data_root)
    try:
        version = (RUBRICS[args.rubric] if args.rubric in RUBRICS else rubric_by_version(args.rubric)).version
        rounds = _parse_rounds(
            args.rounds, sorted({a.round for a in store.artifacts(args.experiment, kind="steps")})
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    keys = [dg.MultiPartitionKey({"round": round_key(args.experiment, r), "rubric": version}) for r in rounds]
    url = dagster_client.dagster_url(args.dagster_url)
    if dagster_client.is_running(url):
        backfill = dagster_client.launch_backfill(url, [str(k) for k in keys],
                                                  ["rescored_scores", "rescored_advantages"],
                                                  f"rescore {args.experiment} with {version}")  # fmt: skip
        print(f"launched backfill {backfill} on {url}: {len(keys)} partitions ({version}, rounds {rounds})")
        return 0
    instance = get_instance(args.data_root)
    for round_, key in zip(rounds, keys, strict=True):
        result = _execute(instance, args.data_root, RESCORE_JOB, key)
        if not result.success:
            print(f"re-scoring round {round_} failed (dagster run {result.run_id})", file=sys.stderr)
            return 1
        record = store.artifact(args.experiment, round_, "rescore_advantages", version)
        comparison = store.artifact(args.experiment, round_, "rescore_comparison", version).meta
        print(
            f"round {round_:>3}  {version}  advantages {record.content_hash[:12]}  "
            f"reward r={comparison['reward_correlation']}  sign flips {comparison['sign_flip_share']:.3f}"
        )
    return 0


def _print_report(evaluations) -> None:
    print(f"{'round':>5}  {'success':>7}  {'return':>7}  {'steps':>6}  {'invalid':>7}  policy")
    for e in evaluations:
        print(
            f"{e.round:>5}  {e.success_rate:>7.2f}  {e.mean_return:>+7.2f}  {e.mean_steps:>6.1f}  "
            f"{e.invalid_action_rate:>7.3f}  {e.policy_hash[:12]}"
        )


def cmd_report(args) -> int:
    evaluations = _store(args.data_root).evaluations(args.experiment)
    if not evaluations:
        print(f"no evaluations for experiment {args.experiment!r} under {args.data_root}", file=sys.stderr)
        return 1
    if args.json:
        rows = [{"round": e.round, "policy": "initial" if e.round == 0 else f"round {e.round}",
                 "success_rate": e.success_rate, "mean_return": e.mean_return, "mean_steps": e.mean_steps,
                 "invalid_action_rate": e.invalid_action_rate, "episodes": e.episodes,
                 "policy_hash": e.policy_hash} for e in evaluations]  # fmt: skip
        print(json.dumps(rows, indent=2))
    else:
        _print_report(evaluations)
    return 0


def cmd_lineage(args) -> int:
    from creditline.audit import lineage_report

    report = lineage_report(_store(args.data_root), args.experiment, args.round)
    if report is None:
        print(f"no checkpoint for experiment {args.experiment!r} round {args.round}", file=sys.stderr)
        return 1
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.as_text())
    return 0 if report.all_match else 1


def cmd_verify(args) -> int:
    problems = _store(args.data_root).verify(args.experiment)
    for p in problems:
        print(
            f"{p.kind:>8}  {p.path}  expected {p.expected_hash[:12]}  actual {(p.actual_hash or '-')[:12]}  {p.detail}"
        )
    print(f"{len(problems)} problem(s) in experiment {args.experiment!r}")
    return 1 if problems else 0


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_advantages(args) -> int:
    from creditline.advantages import compute
    from creditline.store import read_parquet, write_parquet_atomic

    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --param {item!r} is not key=value", file=sys.stderr)
            return 2
        params[key] = _parse_value(value)
    steps = read_parquet(args.steps)
    if args.scores:  # a rubric's rewards replace the environment's
        scores = read_parquet(args.scores)[["episode_id", "step_idx", "step_reward", "episode_reward"]]
        steps = steps.drop(columns=["step_reward", "episode_reward"], errors="ignore").merge(
            scores, on=["episode_id", "step_idx"], how="left", validate="one_to_one"
        )
        print(f"rewards from {args.scores}")
    elif "episode_reward" not in steps.columns and {"episode_id", "step_reward"} <= set(steps.columns):
        steps["episode_reward"] = steps.groupby("episode_id")["step_reward"].transform("sum")
        print("episode_reward = sum of step_reward per episode (no episode_reward column, no --scores)")
    try:
        steps["advantage"] = compute(args.estimator, steps, **params)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written = write_parquet_atomic(steps, args.out)
    print(f"wrote {written.rows} rows to {written.path} (sha256 {written.content_hash[:12]})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="creditline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=None, help=f"default: ${DATA_ROOT_ENV} or ./creditline-data")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_)
        p.set_defaults(func=func)
        p.add_argument("--data-root", default=argparse.SUPPRESS)
        return p

    run = add("run", cmd_run, "run rounds through Dagster")
    run.add_argument("--experiment", default=None, help=f"experiment name (default {DEFAULT_EXPERIMENT})")
    run.add_argument("--rounds", type=int, default=None, help="total rounds (default: the config's `rounds`)")
    run.add_argument("--config", default=None, help="TOML file overriding the default experiment config")
    register = add(
        "register", cmd_register, "register an experiment for the round sensor, without running it"
    )
    register.add_argument("--experiment", default=None)
    register.add_argument("--config", default=None)
    rescore = add("rescore", cmd_rescore, "re-score stored rounds with another rubric version (a backfill)")
    rescore.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    rescore.add_argument("--rubric", required=True, help="a registered rubric name or version")
    rescore.add_argument("--rounds", default=None, help="A..B (default: every round with rollouts)")
    rescore.add_argument("--dagster-url", default=None, help="a running webserver (default $CREDITLINE_DAGSTER_URL "
                         "or http://127.0.0.1:3000); in-process when none answers")  # fmt: skip
    for name, func, help_ in [("report", cmd_report, "evaluation per round"),
                              ("lineage", cmd_lineage, "the chain behind a round's checkpoint"),
                              ("verify", cmd_verify, "re-hash every recorded artifact")]:  # fmt: skip
        p = add(name, func, help_)
        p.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
        p.add_argument("--json", action="store_true")
        if name == "lineage":
            p.add_argument("--round", type=int, default=None, help="default: the newest round")
    adv = add("advantages", cmd_advantages, "compute advantages for a steps Parquet file")
    adv.add_argument("--estimator", required=True)
    adv.add_argument("--param", action="append", default=[], help="key=value (JSON values), repeatable")
    adv.add_argument("--steps", required=True)
    adv.add_argument(
        "--scores", default=None, help="a round's scores.parquet: use its step and episode rewards"
    )
    adv.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.data_root = str(Path(args.data_root or default_data_root()).resolve())
    os.environ[DATA_ROOT_ENV] = args.data_root
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
