"""What an interrupt (Ctrl-C, SIGTERM) looks like once raised, and how the CLI keeps its report to one line.

Python raises `KeyboardInterrupt` (so does the CLI's SIGTERM handler); inside a step, Dagster raises its own
`DagsterExecutionInterruptedError`. A library may wrap either in an error of its own (DuckDB's
`RuntimeError('Query interrupted')`, MLflow's `MlflowException`), and may log what it caught, traceback and
all, before it re-raises: MLflow's SQL session logs an ERROR, SQLAlchemy "Error closing cursor". The CLI
reports an interrupt in one line (`pipelines.cli.INTERRUPTED`); `logs_quiet_once_interrupted` keeps those
logs off stderr while a round runs.

Imports neither Dagster nor MLflow: the CLI reads these names when it starts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

INTERRUPT_CLASSES = ("KeyboardInterrupt", "DagsterExecutionInterruptedError")
"""The errors that stand for an interrupt, by name (Dagster's is named: importing this imports no Dagster)."""


def is_an_interrupt(error: BaseException) -> bool:
    """True when `error` itself is an interrupt (a `KeyboardInterrupt`, or Dagster's interrupt in a step)."""
    return isinstance(error, KeyboardInterrupt) or type(error).__name__ in INTERRUPT_CLASSES


def raised_by_an_interrupt(exc: BaseException) -> bool:
    """True when `exc`, or an error it was raised from or while handling (`__cause__`, `__context__`), is an
    interrupt."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        if is_an_interrupt(error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


class _QuietOnceInterrupted(logging.Filter):
    """Refuses every record once `interrupted()` is true."""

    def __init__(self, interrupted: Callable[[], bool]) -> None:
        super().__init__()
        self.interrupted = interrupted

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.interrupted()


@contextlib.contextmanager
def logs_quiet_once_interrupted(interrupted: Callable[[], bool]) -> Iterator[None]:
    """Inside the block, once `interrupted()` is true, no log record reaches a terminal stream: the stream
    handlers of the loggers that exist on entry, and Python's last-resort handler, which writes the records of
    a library that set up no handler (SQLAlchemy's). Until then every record passes as before; handlers that
    write elsewhere (files, Dagster's event log) are left alone. A library that sets up its handlers when it
    is imported (MLflow) is covered if it was imported before the block; one that sets them up on first use
    later (transformers) is not, nor are other processes, nor what the `warnings` module prints.

    `interrupted` must turn true before the library that the interrupt hit can log: the Python handler of a
    signal runs after the signal is written to the wakeup file descriptor, so a drain of that pipe will do
    (`round_runner.Interrupts.drain`). The exception a library logs need not show the interrupt: an
    interrupt raised inside sqlite's progress callback is swallowed, and MLflow logs the bare
    `OperationalError: interrupted` it turned into."""
    quiet = _QuietOnceInterrupted(interrupted)
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = [h for lg in loggers if isinstance(lg, logging.Logger) for h in lg.handlers]
    streams = [
        h
        for h in {logging.lastResort, *handlers}
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    for handler in streams:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in streams:
            handler.removeFilter(quiet)
