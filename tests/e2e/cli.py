"""The `creditline` command as the end-to-end tests run it, on a given data root.

By default the command runs in the test's own process (`pipelines.cli.main`, its output captured): a
subprocess would pay the seconds of importing torch, transformers, Dagster and MLflow on every call, and
the end-to-end tests make about a hundred calls. What the process boundary itself decides (the entry point,
signals, a kill) is tested through `subprocess=True` and by the fault tests, which always start processes.
Each in-process call leaves the process as it found it: environment, SIGTERM handler, unraisable hook.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess as sp
import sys
from pathlib import Path

DATA_ROOT = "CREDITLINE_DATA_ROOT"


def creditline(
    data_root: Path, *args: str, timeout: int = 900, subprocess: bool = False, env: dict | None = None
) -> sp.CompletedProcess:
    """`creditline ARGS` with CREDITLINE_DATA_ROOT=data_root: its exit code, stdout and stderr; `env`: more
    environment for a subprocess."""
    if subprocess:
        env = {**os.environ, **(env or {}), DATA_ROOT: str(data_root)}
        return sp.run([sys.executable, "-m", "pipelines.cli", *args], env=env, capture_output=True, text=True,
                      timeout=timeout)  # fmt: skip
    return in_process([str(arg) for arg in args], {DATA_ROOT: str(data_root)})


class Terminal(io.StringIO):
    """Captured output that says it is a terminal, as a person's shell is."""

    def isatty(self) -> bool:
        return True


def in_process(
    argv: list[str], env: dict[str, str] | None = None, terminal: bool = False
) -> sp.CompletedProcess:
    """`creditline ARGV` in this process (with `env` added to the environment; `terminal`: its stderr is a
    terminal): an argparse exit counts as its exit code; the environment, SIGTERM handler and unraisable hook
    are put back afterwards."""
    from pipelines.cli import main

    environ, handler, hook = dict(os.environ), signal.getsignal(signal.SIGTERM), sys.unraisablehook
    out, err = io.StringIO(), (Terminal() if terminal else io.StringIO())
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors exit 2
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(environ)
        signal.signal(signal.SIGTERM, handler)
        sys.unraisablehook = hook
    return sp.CompletedProcess(["creditline", *argv], code, out.getvalue(), err.getvalue())
