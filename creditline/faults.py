"""Failpoints: named places where a test can have the process killed, to prove crash safety.

The fault tests (tests/faults/) run `creditline run` with `CREDITLINE_FAULT=<name>:<n>` and the
process SIGKILLs itself the n-th time it reaches the failpoint `<name>` (default n = 1): no cleanup,
no `finally`, exactly like an OOM kill or a pre-empted node. `CREDITLINE_FAULT_SIGNAL=TERM` (or INT)
sends that signal instead: a polite stop that lands at a known place; `STOP` pauses the process there, with no
other thread of it holding the lineage catalog. `CREDITLINE_FAULT_ONCE=<file>`
makes the failpoint fire in one process only, across all that reach it (a Dagster run worker and the worker
of its retry): the first creates `<file>` and writes its `creditline.liveness.ProcessId` in it before it
is signalled, and any process that finds the file exists passes. Without the variables a failpoint is a
dictionary lookup. Names used in the code:

    write:<file name>      a file or folder is complete under its temp name, not yet renamed
    publish:<file name>    a file of an artifact is uploaded to its temporary key in object storage, not moved
    lineage:<kind>         inside the lineage transaction that records an artifact, before COMMIT
    after:<kind>           an artifact's record is written, inside its stage's records transaction
                           (`assets.stage.Stage.produce`), not yet committed
    recorded:<asset>       a stage's records are committed; its metrics are not logged yet, the next
                           stage has not started (a stage boundary)
    train:update           after each optimiser update of the trainer
    mlflow:<asset>         an asset's metrics are sent to MLflow; it has not materialised yet
    commit:round           everything of the round is written but its commit point
"""

from __future__ import annotations

import os
import signal
from collections import Counter

from creditline.liveness import this_process

FAULT_ENV = "CREDITLINE_FAULT"
SIGNAL_ENV = "CREDITLINE_FAULT_SIGNAL"
ONCE_ENV = "CREDITLINE_FAULT_ONCE"


def _parse(spec: str) -> tuple[str, int]:
    name, sep, count = spec.rpartition(":")
    if sep and count.isdigit():
        return name, int(count)
    return spec, 1


_TARGET = _parse(os.environ[FAULT_ENV]) if os.environ.get(FAULT_ENV) else None
_SIGNAL = signal.Signals[f"SIG{os.environ.get(SIGNAL_ENV, 'KILL')}"]
_hits: Counter[str] = Counter()


def failpoint(name: str) -> None:
    """Signal this process (SIGKILL unless told) if `name` is the armed failpoint and this is its n-th hit."""
    if _TARGET is None or name != _TARGET[0]:
        return
    _hits[name] += 1
    if _hits[name] == _TARGET[1] and _first_to_fire():
        if _SIGNAL == signal.SIGSTOP:
            _stop()
        else:
            os.kill(os.getpid(), _SIGNAL)


def _stop() -> None:
    """SIGSTOP this process while this thread holds the process's turn on the lineage catalog, so that no
    other thread of it (the experiment lease's heartbeat) has the catalog's file attached, and locked, while
    it is stopped: the stop lands at the failpoint, not at whatever another thread was doing."""
    from creditline.store.connection import CATALOG_TURN

    with CATALOG_TURN:
        os.kill(os.getpid(), signal.SIGSTOP)


def _first_to_fire() -> bool:
    """True unless `CREDITLINE_FAULT_ONCE` names a file another process has already created."""
    marker = os.environ.get(ONCE_ENV)
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(str(this_process()))
    return True
