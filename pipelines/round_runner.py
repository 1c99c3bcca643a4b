"""Running a round's job in this process, as `creditline run` and `rescore` do, politely.

Before a round: reclaim what dead processes left (`reaper`, orphan temp files), refuse if another live
process is running this experiment, wait, saying for whom, while another run holds a pool slot. While the
round runs: a step that waits for a pool slot (another experiment's run took it between two of our steps)
is watched from a thread (`_watching_pools`), which says for whom it waits, reclaims the slot if its holder
died, and turns Ctrl-C or SIGTERM into an interrupt at once (Dagster's own wait for a slot never looks at
either). After a failed round: one line per failed step or blocking check, with the innermost cause (the
traceback only with `--debug`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import dagster as dg

from creditline.config.deployment import load_deployment
from creditline.errors import CreditlineError
from pipelines.garbage_collection import rounds_pace
from pipelines.interrupts import INTERRUPT_CLASSES, logs_quiet_once_interrupted
from resources.lineage import PROCESS_TAG


@functools.lru_cache(maxsize=4)
def round_job_def(data_root: str, job_name: str):
    from pipelines.definitions import make_definitions

    return make_definitions(data_root).resolve_job_def(job_name)


def _reconstructable_job(data_root: str, job_name: str):
    """The job as a recipe another process can rebuild (`round_job_def(data_root, job_name)`): what Dagster
    needs to run its steps in other processes (the multiprocess, Celery and Kubernetes executors)."""
    return dg.build_reconstructable_job(
        "pipelines.round_runner", "round_job_def", reconstructable_args=(data_root, job_name)
    )


def execute_partition(
    instance,
    data_root: str,
    job_name: str,
    partition_key,
    tags: dict[str, str] | None = None,
    debug: bool = False,
):
    """Run one partition of a job in this process against the persistent instance.

    The steps run with the cycle collector at the rounds' pace (`garbage_collection`) where they run in this
    process. Dagster's console log stays silent (its step failures come with stack traces); `failure_lines`
    says what went wrong in one line each. With the in-process executor, once Ctrl-C or SIGTERM has come, the
    log handlers that write to stderr (those set up before the run, MLflow's included) print nothing more: the
    CLI reports the interrupt in one line. With `debug`, Dagster's warnings and errors are shown as they
    happen, and nothing is held back.
    """
    from creditline.liveness import this_process

    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING" if debug else "CRITICAL"}}}}
    in_process = load_deployment().dagster.executor == "in_process"
    hold_logs = in_process and not debug  # the steps run here: their libraries log here
    if hold_logs:
        importlib.import_module("mlflow")  # sets up its log handlers on import (the round's assets log to it)
    tags = {**(tags or {}), PROCESS_TAG: str(this_process())}
    with (
        rounds_pace(),  # the cycle collector: ~270 ms a round at Python's pace here
        _interrupt_signals() as seen,
        _watching_pools(data_root, seen),
        logs_quiet_once_interrupted(lambda: bool(seen) or seen.drain())
        if hold_logs
        else contextlib.nullcontext(),
    ):
        if in_process:
            result = round_job_def(data_root, job_name).execute_in_process(
                instance=instance,
                partition_key=partition_key,
                run_config=quiet,
                raise_on_error=False,
                tags=tags,
            )
        else:  # the deployment's executor runs the steps in processes of their own
            job = round_job_def(data_root, job_name)
            tags = {**tags, **job.get_tags_for_partition_key(partition_key, None)}  # execute_job's partition
            # no `with`: entering the result would build every resource again, after the run, to load outputs
            result = dg.execute_job(
                _reconstructable_job(data_root, job_name),
                instance,
                run_config=quiet,
                tags=tags,
                raise_on_error=False,
            )
    if seen or _stopped_by_an_interrupt(result):
        raise RoundInterrupted(result.run_id)
    return result


def _stopped_by_an_interrupt(result) -> bool:
    """True when a failed step's error, or one that caused it, is an interrupt: Dagster raises its own
    inside a step on Ctrl-C or SIGTERM, and a library may wrap it (DuckDB's `RuntimeError('Query
    interrupted')`). The signals themselves are seen through the wakeup pipe; this is what the run recorded
    of them."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            while error is not None:
                if error.cls_name in INTERRUPT_CLASSES:
                    return True
                error = error.cause or error.context
    return False


class RoundInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM arrived while a run executed (whether or not Dagster let it stop the run)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class Interrupts(set[int]):
    """The interrupt signals (SIGINT, SIGTERM) received so far, read from the wakeup pipe by `drain`."""

    def __init__(self, read_end: int) -> None:
        super().__init__()
        self._read_end: int | None = read_end
        # re-entrant: a log filter drains too, and a finalizer that logs may run inside a drain
        self._lock = threading.RLock()

    def drain(self) -> bool:
        """Take in the signals written to the pipe since the last call; True if any interrupt came."""
        with self._lock, contextlib.suppress(BlockingIOError, OSError):
            if self._read_end is not None:
                self.update(s for s in os.read(self._read_end, 4096) if s in (signal.SIGINT, signal.SIGTERM))
        return bool(self)

    def close(self) -> None:
        """Take in the last signals and close the pipe's read end; `drain` then reads nothing more."""
        with self._lock:
            self.drain()
            if self._read_end is not None:
                os.close(self._read_end)
                self._read_end = None


@contextlib.contextmanager
def _interrupt_signals() -> Iterator[Interrupts]:
    """The interrupt signals received inside the block.

    Dagster takes SIGINT/SIGTERM over while it executes a run in this process; an interrupt that
    arrives between two steps is recorded by Dagster and then dropped when the run ends (its in-process
    executor does not look at it), so the run goes on as if nothing happened. Python also writes every
    signal it handles to the wakeup file descriptor, whoever's handler runs: that is where we look.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end)
    on_sigterm = signal.getsignal(signal.SIGTERM)
    seen = Interrupts(read_end)
    try:
        yield seen
    finally:
        # Dagster leaves SIGTERM with SIGINT's handler when a run ends: in a process started with SIGINT
        # ignored (a background job of a script, `nohup ... &`), SIGTERM would be ignored from then on.
        signal.signal(signal.SIGTERM, on_sigterm)
        signal.set_wakeup_fd(previous)
        seen.close()
        os.close(write_end)


SLOT_POLL_S = 2.0
"""How often a run of this process that waits for a pool slot looks at the slot's holder and for Ctrl-C."""


class _WokenToStop(KeyboardInterrupt):
    """Raised in the main thread by `_watching_pools` when an interrupt came while a step waited for a
    slot."""


def _raise_woken(signum, frame):
    raise _WokenToStop("interrupted while waiting for a pool slot")


@contextlib.contextmanager
def _watching_pools(data_root: str, interrupts: Interrupts) -> Iterator[None]:
    """Watch, from a thread, whether this process's run waits for a pool slot; see `_watch_slot_waits`.

    To stop a main thread asleep in Dagster's wait, the watcher signals it with SIGUSR1, whose handler
    (ours for the block) raises a KeyboardInterrupt there: Dagster marks the run failed ("interrupted"),
    frees its pending claims, and returns; `execute_partition` then raises RoundInterrupted.
    """
    stop = threading.Event()
    previous = signal.signal(signal.SIGUSR1, _raise_woken)
    watcher = threading.Thread(
        target=_watch_slot_waits,
        name="pool-slot-watch",
        daemon=True,
        args=(data_root, interrupts, stop, threading.main_thread().ident),
    )
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=30)
        signal.signal(signal.SIGUSR1, previous)


def _watch_slot_waits(
    data_root: str, interrupts: Interrupts, stop: threading.Event, main_thread: int
) -> None:
    """Every SLOT_POLL_S while this process's run waits for a pool slot: reclaim the runs of dead processes
    (their slots go to the waiting steps), say once per change who holds the slots, and wake the main
    thread to stop if Ctrl-C or SIGTERM came. A failed poll (a locked sqlite file) is tried again.

    While a stage computes (`progress.in_stage`) the run waits for nothing (the in-process executor claims a
    step's slot before the step starts), so Dagster is not asked; the instance polled is the process's
    (`_watch_instance`), not one built per round."""
    from creditline import progress
    from creditline.liveness import this_process
    from pipelines.reaper import pool_holders, reap_dead_runs, waits_for_slot

    announced, me = [], str(this_process())
    while not stop.wait(SLOT_POLL_S):
        if progress.in_stage():
            continue
        try:
            instance = _watch_instance(str(Path(data_root) / "dagster_home"))
            if not waits_for_slot(instance, me):
                announced = []
                continue
            for line in reap_dead_runs(instance, data_root):
                print(line, flush=True)
            announced = _announce_holders(pool_holders(instance), announced)
            if interrupts.drain() and not stop.is_set():
                signal.pthread_kill(main_thread, signal.SIGUSR1)
                break
        except Exception:  # noqa: BLE001 - the next poll tries again; the run itself is not affected
            continue


@functools.lru_cache(maxsize=4)
def _watch_instance(home: str) -> dg.DagsterInstance:
    """The Dagster instance at `home` the pool-slot watcher polls, built once per process (~35 ms each)."""
    return dg.DagsterInstance.from_config(home)


def _announce_holders(held: list[str], announced: list[str]) -> list[str]:
    """Print who holds the pool slots when that changed; return what is now announced."""
    if held and held != announced:
        print("waiting: " + "; ".join(held) + " (Ctrl-C to stop)", flush=True)
    return held


def reclaim_dead(instance, data_root: str, store) -> None:
    """Reclaim what dead processes left (runs, pool slots, MLflow runs, experiment leases, temp files) and
    say so: `creditline run`, `rescore` and `register` call it before they start anything."""
    from creditline.store.leases import release_dead_leases
    from creditline.store.orphans import remove_orphans
    from pipelines.reaper import reap_dead_runs

    for line in reap_dead_runs(instance, data_root) + release_dead_leases(store):
        print(line, flush=True)
    for orphan in remove_orphans(data_root):
        print(f"removed {orphan.path}: left by a writer that died", flush=True)


def wait_for_pools(instance, data_root: str, poll_s: float = 2.0) -> None:
    """Block until no other run holds a pool slot, saying what we wait for (and reaping as we go)."""
    from pipelines.reaper import pool_holders, reap_dead_runs

    announced: list[str] = []
    while held := pool_holders(instance):
        announced = _announce_holders(held, announced)
        time.sleep(poll_s)
        for line in reap_dead_runs(instance, data_root):
            print(line, flush=True)


def refuse_if_in_flight(instance, experiment: str) -> None:
    """Another process (the round sensor's run, say) is already running a round of this experiment."""
    import dagster as dg

    from pipelines.reaper import LIVE, describe_run, run_is_dead
    from pipelines.sensors import EXPERIMENT_TAG

    for run in instance.get_runs(dg.RunsFilter(tags={EXPERIMENT_TAG: experiment}, statuses=LIVE)):
        if not run_is_dead(run):
            from creditline.store.leases import LeaseHeldError

            raise LeaseHeldError(
                f"experiment {experiment!r} has a round in flight: {describe_run(run)}; "
                "wait for it to finish, or terminate it in the Dagster UI"
            )


class RoundStopped(CreditlineError, RuntimeError):
    """A blocking check failed: the round stopped before training on bad data (an expected failure)."""


CHECK_FAILED = "DagsterAssetCheckFailedError"


def stopped_by_checks(result, expected: Collection[str] = ()) -> bool:
    """True when every failed step is a blocking check's stop, or failed with an error whose innermost class
    is named in `expected` (a changed input, a table breaking its schema): bad data, not a bug."""
    causes = {_cause(event.event_specific_data.error) for event in result.all_events if event.is_step_failure}
    return bool(causes) and causes <= {CHECK_FAILED, *expected}


def _cause(error) -> str:
    """CHECK_FAILED for a blocking check's stop, else the class name of the error's innermost cause."""
    return CHECK_FAILED if error.cls_name == CHECK_FAILED else _innermost(error).cls_name


def failure_lines(result, debug: bool, expected: Collection[str] = ()) -> list[str]:
    """What stopped a round: failed steps and failed blocking checks, one line each. A step that failed with
    an `expected` error class says its message alone, as the CLI's `error:` lines do."""
    lines = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            if error.cls_name == CHECK_FAILED:
                continue  # the failed check itself is reported below, with its problem
            if debug:
                text = error.to_string()
            else:
                text = root_message(error, with_class=_innermost(error).cls_name not in expected)
            lines.append(f"{event.step_key}: {text}")
        elif event.event_type_value == "ASSET_CHECK_EVALUATION" and not event.event_specific_data.passed:
            data = event.event_specific_data
            problem = data.metadata.get("problem")
            lines.append(
                f"check {data.check_name} on {data.asset_key.to_user_string()} failed: "
                f"{getattr(problem, 'value', problem)}"
            )
    return lines


def _innermost(error):
    while error.cause is not None:
        error = error.cause
    return error


PACKAGES = ("creditline", "pipelines", "assets", "resources", "schemas")
"""This project's packages: the only modules `expected_failures` imports to find a failure's class."""


def expected_failures(result) -> set[str]:
    """The class names of the failed steps' innermost errors that are `CreditlineError`s (a changed input, a
    table breaking its schema), for `failure_lines` and `stopped_by_checks`. Dagster keeps an error's class
    name and message, not its class; the message starts with the class's qualified name (`pkg.module.Class:
    text`), so the class is looked up in its module, imported if a step's process imported it and this one
    did not."""
    names = set()
    for event in result.all_events:
        if event.is_step_failure:
            error = _innermost(event.event_specific_data.error)
            cls = _error_class(error)
            if cls is not None and issubclass(cls, CreditlineError):
                names.add(error.cls_name)
    return names


def _error_class(error) -> type | None:
    """The class a Dagster error names, when one of this project's modules defines it; else None."""
    head = (error.message.strip().splitlines() or [""])[0].partition(": ")[0]
    module, _, name = head.rpartition(".")
    if name != error.cls_name or module.split(".")[0] not in PACKAGES:
        return None
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return cls if isinstance(cls, type) else None


def root_message(error, with_class: bool = True) -> str:
    """The innermost cause of a Dagster error: what the user's data or code actually said, its class named
    once (Dagster's message already starts with the qualified class name: `pkg.module.Class: text`)."""
    error = _innermost(error)
    text = error.message.strip().splitlines()[0] if error.message.strip() else ""
    head, sep, rest = text.partition(": ")
    if sep and head.rsplit(".", 1)[-1] == error.cls_name:
        text = rest
    return f"{error.cls_name}: {text}" if with_class else text
