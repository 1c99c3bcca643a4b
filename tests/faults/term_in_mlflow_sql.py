"""`python -m tests.faults.term_in_mlflow_sql ARGS...`: `creditline ARGS...`, sent SIGTERM from inside the
first write statement that MLflow runs on the data root's tracking store (`$CREDITLINE_DATA_ROOT/mlflow.db`).

A SIGTERM from outside lands at any moment, and now and then inside MLflow's SQL (seen once in a fresh clone of
`make test`). This puts it there every time. A sqlite progress callback, armed on MLflow's connections when
an INSERT or UPDATE starts, signals the process: the Python handler that runs inside the callback (Dagster's,
while a step runs) raises, sqlite turns that into `OperationalError: interrupted`, and MLflow logs that as an
ERROR with its traceback before it re-raises. Everything else is the command's own code, run as `python -m
pipelines.cli` runs it.
"""

from __future__ import annotations

import os
import runpy
import signal
import sqlite3
import sys
from pathlib import Path

import sqlalchemy
import sqlalchemy.event

TRACKING_FILE = Path(os.environ["CREDITLINE_DATA_ROOT"]).resolve() / "mlflow.db"
"""The data root's tracking store (not the template store a first start may build elsewhere)."""
_tracking: set[int] = set()  # ids of the sqlite connections to the tracking store
_fired = False


def _fire() -> int:
    global _fired
    if not _fired:
        _fired = True
        os.kill(os.getpid(), signal.SIGTERM)
    return 0  # go on: what stops the statement is the handler raising in this callback


def _on_connect(connection, _record) -> None:
    if isinstance(connection, sqlite3.Connection):
        files = [row[2] for row in connection.execute("PRAGMA database_list")]
        if any(path and Path(path).resolve() == TRACKING_FILE for path in files):
            _tracking.add(id(connection))


def _before_execute(_conn, cursor, statement: str, _parameters, _context, _many) -> None:
    connection = cursor.connection
    if id(connection) in _tracking and statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
        connection.set_progress_handler(_fire, 1)


if __name__ == "__main__":
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _on_connect)
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", _before_execute)
    sys.argv = ["creditline", *sys.argv[1:]]
    runpy.run_module("pipelines.cli", run_name="__main__", alter_sys=True)
