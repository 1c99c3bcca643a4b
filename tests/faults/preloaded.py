"""`creditline` commands that the fault tests start only to kill, forked from a process that has imported the
libraries once.

A process that runs a round first imports torch, transformers, Dagster, MLflow, DuckDB, pandas and pandera:
about 8 s of CPU (AMD EPYC, 2026-11-27) before a line of the round runs, and the fault tests start about twenty
such processes only to SIGKILL them at a failpoint. Here one server process imports those libraries, and
forks a child per command. The child takes the command's environment, working directory and output files,
and runs `pipelines.cli` as `python -m pipelines.cli` does, as `__main__`. The server waits for it and answers
its exit status: `-9` for a SIGKILL, as `subprocess` says it.

What the child shares with the server is imported code only. No creditline module is imported before the
fork except `creditline.policy.hf` (transformers as creditline imports it, no settings), so every module that
reads its environment when imported (`creditline.faults` reads `CREDITLINE_FAULT`) reads the command's. The
libraries were imported under the server's environment: it is started with `OMP_NUM_THREADS=1`, as every
process of the fault tests runs (the checkpoints they compare depend on the thread count). A command that
ends without being killed ends as an interpreter does: non-daemon threads joined, `atexit` functions run,
output flushed.

The re-runs after a kill, `verify` and whatever a test asserts about the process boundary itself (a signal
from outside, a stopped process) stay as they are: in the test's process (`tests.e2e.cli`) or in a process of
their own.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRELOAD = (
    "torch",
    "creditline.policy.hf",
    "dagster",
    "mlflow",
    "duckdb",
    "pandas",
    "pandera.pandas",
    "pyarrow",
)

SERVER = r"""
import importlib, json, os, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
assert "creditline.faults" not in sys.modules, "a preloaded module imported creditline.faults"
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        import atexit, runpy, threading, traceback
        os.chdir(request["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]  # run_module puts the module's path in sys.argv[0], as `python -m` does
        code = 0
        try:
            runpy.run_module("pipelines.cli", run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class PreloadedCli:
    """A server process with the libraries imported; `run` forks one `creditline` command from it."""

    def __init__(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self._server = subprocess.Popen([sys.executable, "-c", SERVER, *PRELOAD], cwd=ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        self._lock = threading.Lock()
        self._pending = b""
        assert self._answer(timeout_s=300) == {"ready": True}

    def run(self, *args: str, env: dict[str, str], timeout_s: float = 600) -> subprocess.CompletedProcess:
        """`creditline ARGS` with `env` as its whole environment (it must hold `OMP_NUM_THREADS=1`): its exit
        code, stdout and stderr, as `subprocess.run(..., capture_output=True, text=True)` gives them."""
        assert env.get("OMP_NUM_THREADS") == "1", "the libraries were imported with one thread"
        with self._lock, tempfile.TemporaryDirectory() as scratch:
            out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
            request = {"argv": ["creditline", *args], "env": env, "cwd": os.getcwd(), "stdout": str(out),
                       "stderr": str(err)}  # fmt: skip
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            pid = self._answer(timeout_s=30)["pid"]
            try:
                returncode = self._answer(timeout_s)["returncode"]
            except TimeoutError:
                os.kill(pid, 9)
                self._answer(timeout_s=60)  # its exit, so that the next command reads its own answers
                raise
            return subprocess.CompletedProcess(
                ["creditline", *args], returncode, out.read_text(), err.read_text()
            )

    def _answer(self, timeout_s: float) -> dict:
        """The server's next line, read from its pipe without Python's buffering, so `select` sees it."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self._server.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"the preloaded server did not answer within {timeout_s} s")
            chunk = os.read(self._server.stdout.fileno(), 4096)
            assert chunk, f"the preloaded server exited with {self._server.wait()}"
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def killed_at(self, data_root: Path, fault: str, *args: str) -> subprocess.CompletedProcess:
        """`creditline ARGS` on `data_root`, armed to kill itself at the failpoint `fault` (`creditline.faults`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
        env |= {"CREDITLINE_DATA_ROOT": str(data_root), "OMP_NUM_THREADS": "1", "CREDITLINE_FAULT": fault}
        return self.run(*args, env=env)

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=60)
