"""`creditline`: run rounds through Dagster, report, audit lineage, compute advantages from a file.

    creditline run [--experiment NAME] [--rounds N] [--config FILE]
    creditline report [--experiment NAME] [--json]
    creditline lineage [--experiment NAME] [--round R] [--wide | --json]
    creditline verify [--experiment NAME] [--json]        (default: every experiment)
    creditline register [--experiment NAME] [--config FILE]
    creditline compare --estimators A,B,... [--config FILE] [--seeds N] [--rounds R] [--name NAME]
    creditline rescore [--experiment NAME] --rubric NAME|PATH|VERSION [--rounds A..B]
    creditline advantages --estimator NAME [--param k=v ...] --steps IN.parquet [--scores S.parquet]
                          [--sample-filter prof --episodes E.parquet] --out OUT.parquet
    creditline export [--experiment NAME] [--round R] --format pr941|prime-rl|verifiers-v1|prime-rl-rollouts
                      [--rubric NAME|PATH|VERSION] --out FILE.jsonl|DIR
    creditline serve --policy FOLDER | --experiment NAME [--round N] [--engine torch|vllm] [--port P]

Every command takes `--data-root` (default `$CREDITLINE_DATA_ROOT`, else `./creditline-data`) and
`--debug` (tracebacks instead of one-line errors). Expected errors (a `creditline.errors.CreditlineError`: a
bad config, argument or input file, a failed blocking check) print `error: ...` lines and exit 2; a failed
round exits 1.
`--experiment` defaults to the default experiment's name (`verify`: every experiment), `--round` to the newest
round.

Each command imports what it uses, when it runs: `--help`, `report` and `lineage` read the DuckDB catalog
and never import torch, transformers, Dagster, MLflow or vLLM (`tests/test_import_graph.py`; `make
bench-startup` times them).
"""

from __future__ import annotations

import _thread
import argparse
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from creditline import progress
from creditline.config import MAX_ROUNDS, ExperimentConfig, load_config, registration
from creditline.config.checks import field_default
from creditline.config.deployment import load_deployment, redact
from creditline.errors import CreditlineError
from creditline.store import LineageStore
from creditline.store.connection import is_postgres
from creditline.store.data_root import DATA_ROOT_ENV, default_data_root, open_store
from pipelines.interrupts import is_an_interrupt, raised_by_an_interrupt
from pipelines.reachability import check_reachable

if TYPE_CHECKING:
    from creditline.credit.rubrics import Rubric, RubricGroup

DEFAULT_EXPERIMENT = field_default(ExperimentConfig, "name")


class UsageError(CreditlineError, ValueError):
    """A command-line argument that cannot be used; printed as one line, exit 2."""


MAX_PORT = 65_535


def _out_path(text: str) -> Path:
    """`--out FILE` checked before any input is read: a file path (not a folder) in a folder that exists.
    A missing folder is refused rather than created: a mistyped path would otherwise leave a tree behind."""
    path = Path(text)
    if path.is_dir():
        raise UsageError(f"--out {text}: is a folder; give the path of a file in it")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"--out {text}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--out {text}: folder {folder} is not writable")
    return path


def _write_out(write, text: str):
    """`write()` of an --out file, an OSError (a read-only file system, a full disk) as one line naming
    --out and the path, never the writer's temp file."""
    try:
        return write()
    except OSError as exc:
        raise UsageError(f"--out {text}: cannot write it ({exc.strerror or type(exc).__name__})") from None


def _store(data_root: str) -> LineageStore:
    """The store `deployed_resources(data_root)["lineage"]` opens (the same object), without Dagster's
    import."""
    deployment = load_deployment()
    return open_store(
        data_root,
        deployment.lineage.catalog,
        deployment.storage.uri,
        json.dumps(deployment.storage.options, sort_keys=True),
    )


def _known_catalog(store: LineageStore, what: str) -> None:
    if not is_postgres(store.path) and not Path(store.path).exists():
        raise UsageError(
            f"{what}: no lineage store at {store.path}; wrong --data-root (or ${DATA_ROOT_ENV})?"
        )


def _known_experiment(store: LineageStore, name: str) -> None:
    _known_catalog(store, f"--experiment {name!r}")
    if store.experiment_config(name) is None:
        known = store.experiments()
        raise UsageError(
            f"--experiment {name!r} is not registered in {redact(store.path)}; "
            f"registered: {', '.join(known) if known else 'none'}"
        )


def cmd_run(args) -> int:
    config = load_config(args.config, name=args.experiment)
    has = f" (the config has {config.rounds} rounds)"
    first, rounds = (1, config.rounds) if args.rounds is None else _round_range(args.rounds, has)
    if rounds > config.rounds:
        raise UsageError(f"--rounds {args.rounds}: the config has {config.rounds} rounds")
    store = _store(args.data_root)
    failed = run_experiment(args, store, config, first, rounds)
    if not failed:
        _print_report(store.evaluations(config.name))
    return failed


def run_experiment(args, store, config, first: int, rounds: int, tags: dict[str, str] | None = None) -> int:
    """Register `config` and run its rounds `first`..`rounds` that are not committed yet, holding its lease:
    what `creditline run` does; 0, or the exit code of the round that failed."""
    from creditline.store.leases import hold_lease
    from creditline.store.rounds import round_commits
    from pipelines.instance import get_instance
    from pipelines.round_runner import reclaim_dead, refuse_if_in_flight
    from pipelines.rubric_partitions import sync_rubric_partitions
    from resources import deployed_resources
    from resources.tracker import check_writable

    instance = get_instance(args.data_root)
    with hold_lease(store, config.name) as lease:
        if lease.replaced:
            print(
                f"took over experiment {config.name!r} from a `creditline run` that died ({lease.replaced})"
            )
        reclaim_dead(instance, args.data_root, store)
        refuse_if_in_flight(instance, config.name)
        store.register_experiment(config.name, registration(config, store.experiment_config(config.name)))
        sync_rubric_partitions(instance, store)
        check_writable(deployed_resources(args.data_root)["tracker"])  # before any round writes anything
        print(f"experiment {config.name}: {rounds} rounds, data root {args.data_root}", flush=True)
        committed = round_commits(store, config.name)  # a commit is never taken back
        if before := [r for r in range(1, first) if r not in committed]:  # each round trains on the last
            raise UsageError(f"--rounds {args.rounds}: rounds {_spans(before)} are not committed yet")
        for round_ in range(1, rounds + 1):
            if round_ not in committed and (
                failed := _run_round(args, instance, store, config.name, round_, rounds, tags)
            ):
                return failed
    return 0


def _run_round(
    args, instance, store, experiment: str, round_: int, rounds: int, tags: dict[str, str] | None = None
) -> int:
    """Execute one round's partition in this process and print its line; 0, or the exit code of a failure."""
    from assets.partitions import ROUNDS, round_key
    from pipelines.definitions import ROUND_JOB
    from pipelines.reaper import close_round_tracking
    from pipelines.round_runner import RoundInterrupted, execute_partition, wait_for_pools
    from pipelines.sensors import EXPERIMENT_TAG

    key = round_key(experiment, round_)
    if not instance.has_dynamic_partition(ROUNDS.name, key):
        instance.add_dynamic_partitions(ROUNDS.name, [key])
    wait_for_pools(instance, args.data_root)
    start = time.perf_counter()
    drawn = not args.quiet and sys.stderr.isatty()  # the progress line is for a person watching
    previous = progress.install(progress.TerminalLine(f"round {round_:>3}  ") if drawn else None)
    try:
        result = execute_partition(
            instance,
            args.data_root,
            ROUND_JOB,
            key,
            tags={EXPERIMENT_TAG: experiment, **(tags or {})},
            debug=args.debug,
        )
    except RoundInterrupted:
        try:
            close_round_tracking(args.data_root, experiment, round_, "KILLED")
        except Exception as exc:  # the interrupt is what to report; the re-run's round takes its runs over
            print(f"its MLflow runs were not closed: {_first_line(exc)}", file=sys.stderr)
        raise
    finally:
        progress.install(previous)
    if not result.success:
        return _round_failed(args, experiment, round_, result)
    latest = {e.round: e for e in store.evaluations(experiment)}
    print(
        f"round {round_:>3}/{rounds}  success {latest[round_].success_rate:.2f}  "
        f"(initial {latest[0].success_rate:.2f})  return {latest[round_].mean_return:+.2f}  "
        f"{time.perf_counter() - start:5.1f} s",
        flush=True,
    )
    return 0


def _round_failed(args, experiment: str, round_: int, result) -> int:
    """Say why a round failed: a failed blocking check, or a step failed with a `CreditlineError` (a changed
    input, say), is an expected error (exit 2); anything else a failed round (exit 1)."""
    from pipelines.reaper import close_round_tracking
    from pipelines.round_runner import RoundStopped, expected_failures, failure_lines, stopped_by_checks

    expected = expected_failures(result)
    lines = failure_lines(result, args.debug, expected) or ["see the run in the Dagster UI"]
    try:
        close_round_tracking(args.data_root, experiment, round_, "FAILED")
    except Exception as exc:  # e.g. a tracking store that cannot be written, which the step's line names
        lines.append(f"its MLflow runs were not closed: {_first_line(exc)}")
    run = f"dagster run {result.run_id[:8]}"
    if stopped_by_checks(result):
        raise RoundStopped("\n".join([f"round {round_} stopped before training ({run}):", *lines]))
    if stopped_by_checks(result, expected):
        raise RoundStopped("\n".join([f"round {round_} stopped ({run}):", *lines]))
    print(f"round {round_} failed ({run}):", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return 1


def cmd_register(args) -> int:
    """Register an experiment without running it: the round sensor (Dagster UI) will advance it."""
    from pipelines.instance import get_instance
    from pipelines.round_runner import reclaim_dead
    from pipelines.rubric_partitions import sync_rubric_partitions

    config = load_config(args.config, name=args.experiment)
    store = _store(args.data_root)
    instance = get_instance(args.data_root)
    reclaim_dead(instance, args.data_root, store)
    digest = store.register_experiment(
        config.name, registration(config, store.experiment_config(config.name))
    )
    sync_rubric_partitions(instance, store)
    print(
        f"registered {config.name} (config {digest}, {config.rounds} rounds); turn on round_sensor to run it"
    )
    return 0


def _spans(rounds: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> "1..3, 7, 9..10": a long list of rounds in a line."""
    spans: list[list[int]] = []
    for r in rounds:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in spans) or "none"


ROUNDS_HELP = "A..B, or N for 1..N (through round N)"
EXPERIMENT_HELP = f"experiment name (default {DEFAULT_EXPERIMENT})"


def _round_range(text: str, known: str = "") -> tuple[int, int]:
    """`--rounds` as every command reads it: `A..B`, or `N` for `1..N`. B is held to MAX_ROUNDS (an
    experiment's most) before any list of rounds is made: `1..10**12` is one line (`known`: what the
    command has, said with it)."""
    first, sep, last = text.partition("..")
    try:
        low, high = (int(first), int(last)) if sep else (1, int(first))
    except ValueError:
        raise UsageError(f"--rounds {text!r}: expected {ROUNDS_HELP}, e.g. 1..20 or 20") from None
    if low < 1 or high < low:
        raise UsageError(f"--rounds {text}: need 1 <= A <= B{known}")
    if high > MAX_ROUNDS:
        raise UsageError(f"--rounds {text}: an experiment has at most {MAX_ROUNDS} rounds{known}")
    return low, high


def _parse_rounds(text: str | None, available: list[int]) -> list[int]:
    """The rounds `--rounds` asks for (default: `available`), every one of which must have rollouts
    recorded."""
    if not text:
        return available
    low, high = _round_range(text, f" (rounds with rollouts: {_spans(available)})")
    missing = [r for r in range(low, high + 1) if r not in available]
    if missing:
        raise UsageError(
            f"--rounds {text}: rounds {_spans(missing)} have no rollouts recorded "
            f"(available: {_spans(available)})"
        )
    return list(range(low, high + 1))


def cmd_compare(args) -> int:
    """Estimators × seeds on one config, each an experiment run as `run` runs it; then the table (see
    `pipelines.compare`)."""
    from pipelines.compare import member_configs

    config = load_config(args.config)
    rounds = args.rounds or config.rounds
    if not 1 <= rounds <= config.rounds:
        raise UsageError(f"--rounds {args.rounds}: between 1 and the config's rounds ({config.rounds})")
    name = args.name or f"{config.name}-compare"
    estimators = [e.strip() for e in args.estimators.split(",") if e.strip()]
    return compare_members(args, name, member_configs(config, name, estimators, args.seeds, rounds))


def compare_members(
    args,
    name: str,
    members: dict[tuple[str, int], ExperimentConfig],
    finished: Callable[[tuple[str, int], dict], None] | None = None,
) -> int:
    """Run a comparison's members ((estimator, seed) → experiment config) and write its table, picture and
    per-run results under `<data_root>/comparisons/<name>/` and into MLflow: every member registered before
    any round runs, then each one's rounds not committed yet, as `run` runs them, each round's Dagster run
    tagged with the comparison; `finished((estimator, seed), result)` as each member ends. 0, or the exit
    code of the first round that failed. `compare` calls it with the members that
    `pipelines.compare.member_configs` makes; bench/learning.py with its tasks' own, filing each run as it
    ends."""
    from pipelines.compare import COMPARISON_TAG, member_result, round_seconds, write_results
    from pipelines.instance import get_instance

    store = _store(args.data_root)
    for member in members.values():
        store.register_experiment(member.name, registration(member, store.experiment_config(member.name)))
    instance = get_instance(args.data_root)
    results = {}
    for (estimator, seed), member in members.items():
        print(f"compare {name}: {estimator}, seed {seed} ({member.name})", flush=True)
        if failed := run_experiment(args, store, member, 1, member.rounds, {COMPARISON_TAG: name}):
            return failed
        seconds = round_seconds(instance, store, member.name)
        result = results[(name, estimator, seed)] = member_result(store, member, seconds)
        if finished is not None:
            finished((estimator, seed), result)
    estimators = list(dict.fromkeys(estimator for estimator, _ in members))
    folder, markdown = write_results(args.data_root, name, members, results, estimators)
    print(markdown, end="")
    print(f"wrote {folder / 'table.md'} and curves.png; MLflow experiment 'compare-{name}'")
    return 0


def cmd_rescore(args) -> int:
    """Backfill the re-score branch for one rubric version over some rounds."""
    import dagster as dg

    from assets.partitions import round_key
    from creditline.store import record_rubrics
    from pipelines import dagster_client
    from pipelines.definitions import RESCORE_JOB
    from pipelines.instance import get_instance
    from pipelines.round_runner import execute_partition, failure_lines, reclaim_dead
    from pipelines.rubric_partitions import sync_rubric_partitions

    store = _store(args.data_root)
    _known_experiment(store, args.experiment)
    version, loaded = _rescore_version(store, args.rubric)
    rounds = _parse_rounds(
        args.rounds, sorted({a.round for a in store.artifacts(args.experiment, kind="steps")})
    )
    url = dagster_client.dagster_url(args.dagster_url)
    webserver = dagster_client.is_running(url)
    if webserver:
        _require_this_data_root(args, url)
    # every refusal above; the writes from here on
    if loaded is not None:  # recorded with the name it was given: the re-score stage loads it again by it
        record_rubrics(store, {args.rubric: loaded})
    instance = get_instance(args.data_root)
    reclaim_dead(instance, args.data_root, store)  # a killed rescore's run, say: this re-run completes it
    sync_rubric_partitions(instance, store)
    keys = [dg.MultiPartitionKey({"round": round_key(args.experiment, r), "rubric": version}) for r in rounds]
    if webserver:
        backfill = dagster_client.launch_backfill(
            url,
            [str(k) for k in keys],
            ["rescored_scores", "rescored_advantages"],
            f"rescore {args.experiment} with {version}",
        )
        print(
            f"launched backfill {backfill} on {url}: {len(keys)} partitions ({version}, rounds "
            f"{_spans(rounds)}); {url}/overview/backfills/{backfill}",
            flush=True,
        )
        if not args.wait:
            return 0
        status = _wait_for_backfill(url, backfill)
        complete = _print_rescored(store, args.experiment, rounds, version)
        if status != "COMPLETED_SUCCESS":
            print(f"backfill {backfill} ended {status}: see the link above", file=sys.stderr)
        return 0 if complete and status == "COMPLETED_SUCCESS" else 1
    for round_, key in zip(rounds, keys, strict=True):
        result = execute_partition(instance, args.data_root, RESCORE_JOB, key, debug=args.debug)
        if not result.success:
            print(f"re-scoring round {round_} failed (dagster run {result.run_id[:8]}):", file=sys.stderr)
            for line in failure_lines(result, args.debug):
                print(f"  {line}", file=sys.stderr)
            return 1
        _print_rescored(store, args.experiment, [round_], version, header=round_ == rounds[0])
    return 0


def _require_this_data_root(args, url: str) -> None:
    """Refuse a webserver whose code location writes to another data root (or catalog): its backfill would
    re-score that root's rounds, not these."""
    from pipelines import dagster_client

    catalog = load_deployment().lineage.catalog
    served = dagster_client.served_stores(url)
    if any(
        root == args.data_root or (catalog and served_catalog == catalog) for root, served_catalog in served
    ):
        return
    elsewhere = ", ".join(sorted(root for root, _ in served)) or "no creditline code location"
    raise UsageError(
        f"--dagster-url {url} serves data root {elsewhere}, not {args.data_root}: "
        "start `make ui` for this root (CREDITLINE_DATA_ROOT) or name its webserver with --dagster-url"
    )


def _wait_for_backfill(url: str, backfill: str, poll_s: float = 2.0) -> str:
    """Poll the backfill until it has launched its runs and they have ended; its final status."""
    from pipelines import dagster_client

    while (status := dagster_client.backfill_status(url, backfill)) not in dagster_client.FINISHED:
        time.sleep(poll_s)
    return status


def _print_rescored(store, experiment: str, rounds: list[int], version: str, header: bool = True) -> bool:
    """One line per re-scored round: how the new rubric's rewards and advantages compare with those the round
    trained on. False if a round has no comparison recorded."""
    if header:
        columns = f"{'reward r':>8}  {'adv. rank r':>11}  {'sign flips':>10}"
        print(f"{'round':>5}  {'rubric':<16}  {columns}  advantages")
    complete = True
    for round_ in rounds:
        record = store.artifact(experiment, round_, "rescore_advantages", version)
        compared = store.artifact(experiment, round_, "rescore_comparison", version)
        if record is None or compared is None:
            print(f"{round_:>5}  {version:<16}  not re-scored")
            complete = False
            continue
        c = compared.meta
        print(
            f"{round_:>5}  {version:<16}  {_correlation(c['reward_correlation']):>8}  "
            f"{_correlation(c['advantage_rank_correlation']):>11}  {c['sign_flip_share']:>10.3f}  "
            f"{record.content_hash[:12]}"
        )
    return complete


def _correlation(value: float | None) -> str:
    """A correlation to three places; "n/a" where it is undefined (a constant column)."""
    return "n/a" if value is None else f"{value:+.3f}"


def _rescore_version(store: LineageStore, name: str) -> tuple[str, Rubric | RubricGroup | None]:
    """The version `--rubric` stands for, and the rubric loaded for it when `name` is a rubric's (a built-in,
    a plugin's or one by import path; the caller records it), None when `name` is a rubric version itself
    (recorded or defined now, its rubric loadable now). Reads only."""
    from creditline.credit.rubric_registry import UnknownRubric, load_rubric, rubric_by_version, rubric_target
    from creditline.store import rubric_versions

    try:
        rubric_target(name)  # a rubric's name or import path? (imports nothing)
    except UnknownRubric as unknown:
        recorded = {r.version: r.source for r in rubric_versions(store)}
        try:
            rubric_by_version(name, [recorded[name]] if recorded.get(name) else [])
        except ValueError as exc:
            if name in recorded:  # a version scored once, whose rubric is no longer defined
                raise UsageError(f"--rubric {name!r}: {exc}") from None
            raise UsageError(f"--rubric {name!r} is not a rubric version, and {unknown}") from None
        return name, None
    try:
        rubric = load_rubric(name)
    except UnknownRubric as exc:
        raise UsageError(f"--rubric {name!r}: {exc}") from None
    return rubric.version, rubric


def _print_report(evaluations) -> None:
    print(f"{'round':>5}  {'success':>7}  {'return':>7}  {'steps':>6}  {'invalid':>7}  policy")
    for e in evaluations:
        print(
            f"{e.round:>5}  {e.success_rate:>7.2f}  {e.mean_return:>+7.2f}  {e.mean_steps:>6.1f}  "
            f"{e.invalid_action_rate:>7.3f}  {e.policy_hash[:12]}"
        )


def cmd_report(args) -> int:
    store = _store(args.data_root)
    _known_experiment(store, args.experiment)
    evaluations = store.evaluations(args.experiment)
    if not evaluations:
        print(
            f"no evaluations yet for experiment {args.experiment!r} under {args.data_root}", file=sys.stderr
        )
        return 1
    if args.json:
        rows = [
            {
                "round": e.round,
                "policy": "initial" if e.round == 0 else f"round {e.round}",
                "success_rate": e.success_rate,
                "mean_return": e.mean_return,
                "mean_steps": e.mean_steps,
                "invalid_action_rate": e.invalid_action_rate,
                "episodes": e.episodes,
                "policy_hash": e.policy_hash,
            }
            for e in evaluations
        ]
        print(json.dumps(rows, indent=2))
    else:
        _print_report(evaluations)
    return 0


def cmd_lineage(args) -> int:
    from creditline.store.audit import lineage_report

    store = _store(args.data_root)
    _known_experiment(store, args.experiment)
    if args.round is not None:  # a round without a checkpoint is a bad argument
        rounds = sorted({a.round for a in store.artifacts(args.experiment, kind="checkpoint")})
        if args.round not in rounds:
            raise UsageError(
                f"--round {args.round}: experiment {args.experiment!r} has no checkpoint for it; "
                f"rounds with a checkpoint: {_spans(rounds)}"
            )
    report = lineage_report(store, args.experiment, args.round)
    if report is None:  # --round was checked above: no round has trained a checkpoint yet
        print(
            f"experiment {args.experiment!r} has no trained checkpoint yet: no round has run "
            "(`creditline run` trains round 1)",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.as_text(wide=args.wide))
    return 0 if report.all_match else 1


def _tracking_problems(data_root: str, store: LineageStore, experiment: str) -> list:
    """Committed rounds whose MLflow run is missing or not FINISHED; runs left RUNNING by nobody."""
    from creditline.store import Problem
    from creditline.store.rounds import EXPERIMENT_RUN_ROUND, round_commits, tracking_runs
    from resources import deployed_resources

    runs = tracking_runs(store, experiment)
    problems = []
    for round_ in round_commits(store, experiment):
        if round_ not in runs:
            problems.append(
                Problem(
                    "tracking",
                    f"{experiment}/{round_}",
                    "",
                    None,
                    f"{experiment}/{round_}: committed without an MLflow run",
                )
            )
    tracker = (
        deployed_resources(data_root)["tracker"] if runs else None
    )  # MLflow is imported only when there is a run to ask
    for round_, run_id in runs.items():
        try:
            status = tracker.status(run_id)
        except Exception as exc:  # deleted from the tracking server, or the server is unreachable
            status = f"unreadable ({type(exc).__name__})"
        which = "the experiment's parent run" if round_ == EXPERIMENT_RUN_ROUND else f"round {round_}'s run"
        if status != "FINISHED":
            problems.append(
                Problem(
                    "tracking",
                    f"{experiment}/{round_}",
                    run_id,
                    None,
                    f"{experiment}: MLflow {which} {run_id[:8]} is {status}, not FINISHED",
                )
            )
    return problems


def _leftover_problems(data_root: str, store: LineageStore) -> list:
    """What dead processes left on the data root (runs in flight, pool slots, leases): it blocks every
    experiment there, so it is reported whichever experiment is verified."""
    from creditline.store import Problem
    from creditline.store.leases import dead_leases

    cleans = "; `creditline run`, `rescore` or `register` cleans it up"
    problems = [
        Problem(
            "stale_lease",
            "",
            "",
            None,
            f"experiment {experiment!r}: lease held by a `creditline run` that is gone ({holder}){cleans}",
        )
        for experiment, holder in dead_leases(store)
    ]
    if (Path(data_root) / "dagster_home").is_dir():
        from pipelines.instance import get_instance
        from pipelines.reaper import leftover_problems

        instance = get_instance(data_root)
        problems += [
            Problem(kind, "", "", None, detail + cleans) for kind, detail in leftover_problems(instance)
        ]
        instance.dispose()
    return problems


def cmd_verify(args) -> int:
    from creditline.store import orphan_problems
    from creditline.store.checked import checked
    from creditline.store.rounds import round_problems

    store = _store(args.data_root)
    if args.experiment is not None:
        _known_experiment(store, args.experiment)
    else:
        _known_catalog(store, "verify")
    experiments = [args.experiment] if args.experiment is not None else store.experiments()
    problems, summary = [], []
    for experiment in experiments:
        problems += store.verify(experiment) + round_problems(store, experiment)
        problems += _tracking_problems(args.data_root, store, experiment)
        summary.append(checked(store, experiment).line())
    problems += orphan_problems(args.data_root) + _leftover_problems(args.data_root, store)
    summary.append(f"checked data root {args.data_root}: temp files of dead writers, runs, slots and leases")
    if args.json:
        print(json.dumps([vars(p) for p in problems], indent=2))
    for p in problems if not args.json else []:
        print(f"{p.kind:>12}  {p.detail}")
    scope = (
        f"experiment {args.experiment!r}"
        if args.experiment is not None
        else f"{len(experiments)} experiment(s)" + (f" ({', '.join(experiments)})" if experiments else "")
    )
    for line in [*summary, f"{len(problems)} problem(s) in {scope}"]:
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 1 if problems else 0


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _read_input(path: str, flag: str):
    """A Parquet file given on the command line, or one line saying why it cannot be read."""
    import pyarrow as pa

    from creditline.store import read_parquet

    if not Path(path).is_file():
        raise UsageError(f"{flag} {path}: no such file")
    try:
        return read_parquet(path)
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"{flag} {path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None


def cmd_advantages(args) -> int:
    """A steps table's advantages as a round computes them (`creditline.credit.round_advantages.estimate`):
    the same
    step join with a scores table, the same sample filter and the same fill of an imported step's preset."""
    from creditline.config import AdvantageSettings
    from creditline.credit.advantages import AdvantageInputError
    from creditline.credit.advantages.registry import resolve
    from creditline.credit.round_advantages import REWARD_COLUMNS, STEP_KEY, estimate, join_on_step
    from creditline.store import write_parquet_atomic

    out = _out_path(args.out)
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--param {item!r} is not key=value")
        params[key] = _parse_value(value)
    try:
        resolve(args.estimator, params)
    except ValueError as exc:
        raise UsageError(f"--estimator {args.estimator} --param: {exc}") from None
    if args.filter_remove < 1:
        raise UsageError(f"--filter-remove {args.filter_remove}: must be at least 1")
    settings = AdvantageSettings(args.estimator, params, args.sample_filter, args.filter_remove)
    steps = _read_input(args.steps, "--steps")
    if steps.empty:
        raise UsageError(f"--steps {args.steps}: the table has no rows")
    episodes = None
    if args.sample_filter != "none":
        if not args.episodes:
            raise UsageError(
                f"--sample-filter {args.sample_filter}: needs --episodes (the round's episodes.parquet)"
            )
        episodes = _read_input(args.episodes, "--episodes")
        if missing := [c for c in ["episode_id", "success"] if c not in episodes.columns]:
            raise UsageError(f"--episodes {args.episodes}: missing column(s) {missing}")
    if args.scores:  # a rubric's rewards replace the environment's
        scores = _read_input(args.scores, "--scores")
        if missing := [c for c in [*STEP_KEY, *REWARD_COLUMNS] if c not in scores.columns]:
            raise UsageError(f"--scores {args.scores}: missing column(s) {missing}")
        if missing := [c for c in STEP_KEY if c not in steps.columns]:
            raise UsageError(f"--steps {args.steps}: missing column(s) {missing}")
        for table, flag, path in ((steps, "--steps", args.steps), (scores, "--scores", args.scores)):
            repeated = table.duplicated(STEP_KEY).to_numpy()
            if repeated.any():
                row = int(repeated.argmax())
                raise UsageError(
                    f"{flag} {path}: row {row}: a second row of step {table[STEP_KEY].iloc[row].tolist()}"
                )
        without = steps.drop(columns=REWARD_COLUMNS, errors="ignore")
        try:
            steps = join_on_step(without, scores, REWARD_COLUMNS, f"--scores {args.scores}: its rows")
        except ValueError as exc:  # rows that do not cover every step of --steps
            raise UsageError(str(exc)) from None
        print(f"rewards from {args.scores}")
    elif "episode_reward" not in steps.columns and {"episode_id", "step_reward"} <= set(steps.columns):
        steps["episode_reward"] = steps.groupby("episode_id")["step_reward"].transform("sum")
        print("episode_reward = sum of step_reward per episode (no episode_reward column, no --scores)")
    try:
        advantage, kept = estimate(steps, settings, episodes)
    except AdvantageInputError as exc:  # the table breaks the input contract: it names column and row
        raise UsageError(f"--steps {args.steps}: {exc}") from None
    steps["advantage"] = advantage
    if args.sample_filter != "none":
        steps["kept"] = kept
    written = _write_out(lambda: write_parquet_atomic(steps, out), args.out)
    print(f"wrote {written.rows} rows to {written.path} (sha256 {written.content_hash[:12]})")
    return 0


def _out_dir(text: str) -> Path:
    """`--out DIR` for a format written as a folder of files: a folder that exists, or one whose parent
    exists (it is then created; a missing parent is refused, as for `--out FILE`). Files already in it
    that the export writes are replaced; others are left alone."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {text}: is a file; this format writes a folder (give a folder's path)")
    folder = path if path.is_dir() else path.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"--out {text}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--out {text}: folder {folder} is not writable")
    return path


def _chat_system(store: LineageStore, config, round_: int) -> str | None:
    """The system message of a round played here: the environment's `instructions` when its prompts were
    chat conversations (`prompt_format` chat/chat-last, or "auto" with a tokenizer that has a template)."""
    from creditline.config.stage_settings import CHAT_FORMATS
    from creditline.lineage_chain import parent_record

    prompt_format = config.rollouts.prompt_format
    if prompt_format == "auto":
        from creditline.policy.models import load_tokenizer
        from creditline.rollout.conversation import has_chat_template

        record = parent_record(store, config.name, round_)
        prompt_format = "chat" if has_chat_template(load_tokenizer(record.path)) else "plain"
    if prompt_format not in CHAT_FORMATS:
        return None
    return getattr(config.env.build(), "instructions", None)


def cmd_export(args) -> int:
    from creditline.config import read_registered
    from creditline.interop.export import FOLDER_FORMATS, export_lines, export_rollout_files
    from creditline.store import read_parquet, write_bytes_atomic

    out = _out_dir(args.out) if args.format in FOLDER_FORMATS else _out_path(args.out)
    store = _store(args.data_root)
    _known_experiment(store, args.experiment)
    rounds = sorted({a.round for a in store.artifacts(args.experiment, kind="advantages")})
    if not rounds:
        raise UsageError(f"--experiment {args.experiment!r}: no round has advantages yet")
    round_ = rounds[-1] if args.round is None else args.round
    if round_ not in rounds:
        raise UsageError(f"--round {round_}: no advantages for it; rounds with advantages: {_spans(rounds)}")
    if args.rubric:
        from creditline.credit.rubric_registry import UnknownRubric, get_rubric, rubric_target

        try:
            rubric_target(args.rubric)  # a rubric's name or import path (else a version)
        except UnknownRubric:
            pass
        else:
            try:
                args.rubric = get_rubric(args.rubric).version
            except UnknownRubric as exc:
                raise UsageError(str(exc)) from None
    scores_kind, advantages_kind = (
        ("rescore_scores", "rescore_advantages") if args.rubric else ("scores", "advantages")
    )
    tables = {}
    for kind, variant in (
        ("steps", ""),
        (scores_kind, args.rubric or ""),
        (advantages_kind, args.rubric or ""),
    ):
        record = store.artifact(args.experiment, round_, kind, variant)
        if record is None:
            versions = sorted(
                {a.variant for a in store.artifacts(args.experiment, round_, "rescore_advantages")}
            )
            raise UsageError(
                f"--rubric {args.rubric}: round {round_} was not re-scored with it; "
                f"re-scored versions: {', '.join(versions) or 'none'}"
            )
        tables[kind] = read_parquet(record.path)
    config = read_registered(store.experiment_config(args.experiment))
    staged = store.artifact(args.experiment, round_, "source")
    source_format = staged.meta.get("format") if staged is not None else None
    source = (
        Path(staged.path) / ("traces.jsonl" if source_format == "v1" else "results.jsonl")
        if staged is not None
        else None
    )
    if args.format in ("verifiers-v1", *FOLDER_FORMATS) and source_format != "v1":
        raise UsageError(
            f"--format {args.format}: round {round_} was not imported from verifiers v1 traces "
            "(`creditline import verifiers .../traces.jsonl`); use pr941 or prime-rl"
        )
    steps, scores, advantages = tables["steps"], tables[scores_kind], tables[advantages_kind]
    if args.format in FOLDER_FORMATS:
        files = export_rollout_files(round_, steps, scores, advantages, source)
        for relative, lines in files.items():
            text = "".join(line + "\n" for line in lines)
            _write_out(
                lambda: write_bytes_atomic(text.encode("utf-8"), out / relative),  # noqa: B023
                args.out,
            )
            print(f"wrote {len(lines)} episodes of {args.experiment} round {round_} to {out / relative}")
        return 0
    system = _chat_system(store, config, round_) if args.format == "pr941" and source is None else None
    lines = export_lines(
        args.format,
        args.experiment,
        round_,
        steps,
        scores,
        advantages,
        config.rollouts.temperature,
        source,
        source_format=source_format or "v1",
        env_name=config.env.name,
        system=system,
    )
    text = "".join(line + "\n" for line in lines)
    digest = _write_out(lambda: write_bytes_atomic(text.encode("utf-8"), out), args.out)
    print(
        f"wrote {text.count(chr(10))} {args.format} lines of {args.experiment} round {round_} to {args.out} "
        f"(sha256 {digest[:12]})"
    )
    return 0


def cmd_import(args) -> int:
    """Make verifiers' saved rollouts the experiment's next round, then score, train and evaluate it."""

    from creditline.config.sampling_settings import sampling_problem
    from creditline.interop.imported_rollouts import SourceError
    from creditline.interop.verifiers_import import (
        read_source,
        record_source,
        source_tables,
        token_id_problem,
    )
    from creditline.lineage_chain import ensure_initial_policy, parent_checkpoint
    from creditline.policy.initial_policy import initial_vocab_size
    from creditline.store.leases import hold_lease
    from pipelines.instance import get_instance
    from pipelines.round_runner import reclaim_dead, refuse_if_in_flight
    from pipelines.rubric_partitions import sync_rubric_partitions
    from resources import deployed_resources
    from schemas import SCHEMAS, validate

    config = load_config(args.config, name=args.experiment)
    try:
        source = read_source(args.path)  # every line checked before anything is stored
        tables = source_tables(source, config.name, 1)
    except SourceError as exc:
        raise UsageError(str(exc)) from None
    for table in ("episodes", "steps"):
        validate(SCHEMAS[table], getattr(tables, table), f"{table} of {source.rollouts_file}")
    if problem := sampling_problem(tables.steps):
        raise UsageError(f"{source.rollouts_file}: {problem}")
    try:  # every check that needs no store comes before the data root is touched: a refusal writes nothing
        vocab = initial_vocab_size(config)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    if problem := token_id_problem(source, vocab):
        raise UsageError(problem)
    store = _store(args.data_root)
    lineage = deployed_resources(args.data_root)["lineage"]
    in_use = is_postgres(store.path) or Path(store.path).exists()
    if (
        in_use and store.experiment_config(config.name) is not None
    ):  # a refusal here leaves the root as it was
        _import_target(store, config, source)
    instance = get_instance(args.data_root)
    with hold_lease(store, config.name):
        reclaim_dead(instance, args.data_root, store)
        refuse_if_in_flight(instance, config.name)
        round_, staged = _import_target(store, config, source)  # again, under the lease
        store.register_experiment(config.name, registration(config, store.experiment_config(config.name)))
        sync_rubric_partitions(instance, store)
        ensure_initial_policy(store, config, lineage.checkpoint_dir(config.name, 0))
        parent_checkpoint(store, config.name, round_)  # the parent is there, unchanged
        if staged is None or staged.meta.get("files") != source.describe()["files"]:
            folder = lineage.round_dir(config.name, round_) / "source"
            staged = record_source(store, source, folder, config.name, round_)
        print(
            f"importing {len(source.rollouts)} {source.format} rollouts from {source.rollouts_file} as "
            f"{config.name} round {round_} (source {staged.content_hash[:12]})",
            flush=True,
        )
        failed = _run_round(args, instance, store, config.name, round_, config.rounds)
    if not failed:
        _print_report(store.evaluations(config.name))
    return failed


def _import_target(store: LineageStore, config, source):
    """The round an import of `source` makes (the first one not committed) and its staged source record,
    if any; a `UsageError` where it cannot: a config other than the registered one, every round run, or a
    round that began from other rollouts. Reads only."""
    from creditline.config import read_registered
    from creditline.store import ExperimentConfigMismatch
    from creditline.store.files import config_hash
    from creditline.store.rounds import round_commits

    registered = store.experiment_config(config.name)
    if registered is not None and read_registered(registered) != config:  # as `register_experiment` would
        raise ExperimentConfigMismatch(config.name, config_hash(registered), config_hash(config.to_dict()))
    committed = round_commits(store, config.name)
    round_ = next(r for r in range(1, len(committed) + 2) if r not in committed)
    if round_ > config.rounds:
        raise UsageError(
            f"experiment {config.name!r} has run all {config.rounds} rounds of its config; "
            "raise `rounds` in its --config to import another"
        )
    staged = store.artifact(config.name, round_, "source")
    if staged is None and store.artifact(config.name, round_, "steps") is not None:
        raise UsageError(
            f"round {round_} of {config.name!r} has generated rollouts already; "
            "finish it with `creditline run` first"
        )
    if (
        staged is not None
        and staged.meta.get("files") != source.describe()["files"]
        and store.artifact(config.name, round_, "episodes") is not None
    ):
        raise UsageError(
            f"round {round_} of {config.name!r} was imported from other files "
            f"({staged.meta.get('files', [{}])[0].get('name')}); finish it with `creditline run`"
        )
    return round_, staged


def cmd_serve(args) -> int:
    """Serve a checkpoint on vLLM's OpenAI-compatible routes (`creditline.serve.serving_http`) until
    stopped."""
    from creditline.lineage_chain import served_checkpoint
    from creditline.serve.serving_http import load_served_policy, serve

    if not 0 <= args.port <= MAX_PORT:  # the OS would take it modulo 65536: 70000 serves on 4464
        raise UsageError(f"--port {args.port}: must be 1..{MAX_PORT}, or 0 for any free port")
    if (args.policy is None) == (args.experiment is None):
        raise UsageError("give --policy FOLDER, or --experiment NAME [--round N]")
    if args.policy is not None:
        folder, name = Path(args.policy), args.policy
    else:
        store = _store(args.data_root)
        _known_experiment(store, args.experiment)
        record = served_checkpoint(store, args.experiment, args.round)
        folder, name = Path(record.path), f"{args.experiment}/round-{record.round}"
    if not (folder / "config.json").is_file():
        raise UsageError(f"--policy {folder}: not a checkpoint folder (no config.json)")
    if args.engine == "vllm":
        from creditline.engines.vllm_platform import served_vllm_problems

        if problems := served_vllm_problems(folder):
            raise UsageError("\n".join(problem.line("--engine vllm") for problem in problems))
    try:
        serve(
            load_served_policy(args.engine, folder, args.model_name or name), args.host, args.port, args.seed
        )
    except KeyboardInterrupt:  # stopped while loading; once serving, SIGTERM/SIGINT return normally
        return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="creditline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=None, help=f"default: ${DATA_ROOT_ENV} or ./creditline-data")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        p.set_defaults(func=func)
        p.add_argument("--data-root", default=argparse.SUPPRESS)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
        return p

    run = add("run", cmd_run, "run rounds through Dagster")
    run.add_argument("--experiment", default=None, help=f"experiment name (default {DEFAULT_EXPERIMENT})")
    run.add_argument("--rounds", default=None, help=f"{ROUNDS_HELP} (default: every round of the config)")
    run.add_argument("--config", default=None, help="TOML file overriding the default experiment config")
    run.add_argument(
        "--quiet", action="store_true", help="no progress line inside a round (drawn only on a terminal)"
    )
    register = add(
        "register", cmd_register, "register an experiment for the round sensor, without running it"
    )
    register.add_argument(
        "--experiment", default=None, help=f"experiment name (default {DEFAULT_EXPERIMENT})"
    )
    register.add_argument("--config", default=None, help="TOML file overriding the default experiment config")
    rescore = add("rescore", cmd_rescore, "re-score stored rounds with another rubric version (a backfill)")
    rescore.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=EXPERIMENT_HELP)
    rescore.add_argument(
        "--rubric",
        required=True,
        help="a rubric: a built-in's or plugin's name, an import path, or a version",
    )
    rescore.add_argument("--rounds", default=None, help=f"{ROUNDS_HELP} (default: every round with rollouts)")
    rescore.add_argument(
        "--dagster-url",
        default=None,
        help="a running webserver of this data root (default $CREDITLINE_DAGSTER_URL "
        "or http://127.0.0.1:3000); in-process when none answers",
    )
    rescore.add_argument(
        "--wait", action="store_true", help="with a webserver: wait for the backfill, then print each round"
    )
    for name, func, help_ in [
        ("report", cmd_report, "evaluation per round"),
        ("lineage", cmd_lineage, "the chain behind a round's checkpoint"),
        ("verify", cmd_verify, "re-hash every artifact, check edges, rounds and tracking"),
    ]:
        p = add(name, func, help_)
        if name == "verify":
            p.add_argument("--experiment", default=None, help="default: every registered experiment")
        else:
            p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=EXPERIMENT_HELP)
        p.add_argument("--json", action="store_true", help="JSON instead of a table")
        if name == "lineage":
            p.add_argument("--round", type=int, default=None, help="default: the newest round")
            p.add_argument("--wide", action="store_true", help="every detail: parents' hashes, runs, paths")
    compare = add("compare", cmd_compare, "run estimators × seeds on one experiment config and compare them")
    compare.add_argument("--config", default=None, help="the experiment's TOML file (default: the default)")
    compare.add_argument("--estimators", required=True, help="comma-separated, e.g. grpo,gigpo")
    compare.add_argument("--seeds", type=int, default=3, help="seeds per estimator, 0..N-1 (default 3)")
    compare.add_argument("--rounds", type=int, default=None, help="rounds per run (default: the config's)")
    compare.add_argument("--name", default=None, help="the comparison's name (default: <experiment>-compare)")
    compare.add_argument("--quiet", action="store_true", help="no progress line inside a round")
    adv = add("advantages", cmd_advantages, "compute advantages for a steps Parquet file")
    adv.add_argument("--estimator", required=True, help="an estimator's name (docs/advantages.md)")
    adv.add_argument("--param", action="append", default=[], help="key=value (JSON values), repeatable")
    adv.add_argument("--steps", required=True, help="a steps table (Parquet), e.g. a round's steps.parquet")
    adv.add_argument(
        "--scores", default=None, help="a round's scores.parquet: use its step and episode rewards"
    )
    adv.add_argument("--sample-filter", choices=["none", "prof"], default="none", help="as [advantages]")
    adv.add_argument(
        "--filter-remove", type=int, default=4, help="prof: episodes dropped per group (default 4)"
    )
    adv.add_argument(
        "--episodes", default=None, help="the round's episodes.parquet (their success), for prof"
    )
    adv.add_argument("--out", required=True, help="the advantages table to write (Parquet, atomically)")
    imp = add("import", cmd_import, "make verifiers' saved rollouts the next round of an experiment")
    imp.add_argument("kind", choices=["verifiers"], help="the format family of the files")
    imp.add_argument("path", help="a verifiers run folder, or its results.jsonl / traces.jsonl")
    imp.add_argument("--experiment", default=None, help=f"experiment name (default {DEFAULT_EXPERIMENT})")
    imp.add_argument(
        "--config", default=None, help="TOML file: the experiment's rubric, estimator, policy, ..."
    )
    imp.add_argument("--quiet", action="store_true", help="no progress line inside the round")
    export = add("export", cmd_export, "a round's per-token advantages for verifiers (PR #941) or prime-rl")
    export.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=EXPERIMENT_HELP)
    export.add_argument("--round", type=int, default=None, help="default: the newest round with advantages")
    export.add_argument(
        "--format",
        required=True,
        choices=["pr941", "prime-rl", "verifiers-v1", "prime-rl-rollouts"],
        help="the consumer's format (docs/verifiers.md)",
    )
    export.add_argument(
        "--rubric",
        default=None,
        help="a rubric name or version the round was re-scored with (default: the round's own scores)",
    )
    export.add_argument(
        "--out",
        required=True,
        help="JSON lines file (written atomically); prime-rl-rollouts: "
        "a folder (created if its parent exists)",
    )
    serve_ = add("serve", cmd_serve, "serve a checkpoint to OpenAI/vLLM clients (verifiers) over HTTP")
    serve_.add_argument("--policy", default=None, help="a HF checkpoint folder")
    serve_.add_argument(
        "--experiment", default=None, help="serve a round's checkpoint from the lineage store"
    )
    serve_.add_argument(
        "--round",
        type=int,
        default=None,
        help="with --experiment: 0 is the initial policy (default: the newest checkpoint)",
    )
    serve_.add_argument("--engine", default="torch", choices=["torch", "vllm"], help="default: torch")
    serve_.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve_.add_argument("--port", type=int, default=8000, help="0: any free port (printed when ready)")
    serve_.add_argument(
        "--model-name",
        default=None,
        help="the name clients ask for (default: --policy as given, or EXPERIMENT/round-N)",
    )
    serve_.add_argument(
        "--seed", type=int, default=0, help="seeds requests that name no seed, with a counter"
    )
    return parser


def _first_line(exc: BaseException) -> str:
    """`Class: the first line of its message`, for one-line reports."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


INTERRUPTED = "interrupted: a round left incomplete is completed by `creditline run` again"


REDELIVER_S = 0.05
"""How long after a swallowed interrupt it is delivered again (`_quiet_unraisable`)."""


def _quiet_unraisable(unraisable) -> None:
    """An interrupt whose handler ran inside a finalizer or a garbage-collector callback cannot propagate
    from there: Python would print "Exception ignored" and go on as if no signal had come. A plain one (ours,
    or Python's own handler, which Dagster leaves on SIGTERM after a run) is delivered to the main thread
    again from a thread a moment later, when the callback has returned (delivered from here, it would be
    raised inside this hook and swallowed again). Dagster's own, raised while a run executes, is not lost
    either: `round_runner` reads the signal from the wakeup pipe."""
    exc = unraisable.exc_value
    if type(exc) is KeyboardInterrupt:
        name = exc.args[0] if exc.args and exc.args[0] in ("SIGINT", "SIGTERM") else "SIGINT"
        again = threading.Timer(REDELIVER_S, _thread.interrupt_main, args=(signal.Signals[name],))
        again.daemon = True
        again.start()
    elif not is_an_interrupt(exc):
        sys.__unraisablehook__(unraisable)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not raise the closed pipe again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # not a file descriptor (output captured)
        pass


def prepare(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments `argv` parses to, with this process set up for them: the data root resolved and exported
    (Dagster's instance and the resources read it from the environment), SIGTERM ending like Ctrl-C, MLflow's
    migration notices off. `main` starts with it; so does a script that drives a command's functions from
    Python (bench/learning.py drives `compare_members`)."""
    args = build_parser().parse_args(argv)
    args.data_root = str(Path(args.data_root or default_data_root()).resolve())
    os.environ[DATA_ROOT_ENV] = args.data_root
    signal.signal(signal.SIGTERM, _interrupt)  # a polite kill ends like Ctrl-C: the run is marked failed
    sys.unraisablehook = _quiet_unraisable
    if not args.debug:  # MLflow announces its database migrations on stderr (read when mlflow is imported)
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    return args


def main(argv: list[str] | None = None) -> int:
    args = prepare(argv)
    try:
        if args.func is not cmd_serve:  # a replica being started is one of the endpoints, not yet up
            # a server that is down: one line naming it, before anything is written
            check_reachable(load_deployment(), generation=args.func is cmd_run)
        return args.func(args)
    except BrokenPipeError:  # the reader stopped reading (`creditline report --json | head`): end quietly
        _silence_stdout()
        return 141  # what a process killed by SIGPIPE returns, as `yes | head` does
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except CreditlineError as exc:  # a failure the user can fix: its message alone
        if args.debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except Exception as exc:
        if raised_by_an_interrupt(exc):
            print(INTERRUPTED, file=sys.stderr)
            return 130
        if args.debug:
            raise
        unexpected = "(unexpected: run again with --debug for the traceback)"
        print(f"error: {_first_line(exc)} {unexpected}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
