"""`creditline` commands of the fault tests, forked from a process that has imported the libraries once.

A process that runs a round first imports torch, transformers, Dagster, MLflow, DuckDB, pandas and pandera:
about 8 s of CPU (AMD EPYC, 2026-11-27) before a line of the round runs, and the fault tests start about thirty
such processes only to kill, stop or signal them. Here one server process imports those libraries, and forks a
child per command. The child takes the command's environment, working directory and output pipes, and runs
`pipelines.cli` (or the module a test names) as `python -m` does, as `__main__`. The server reaps it and
answers its exit status: `-9` for a SIGKILL, as `subprocess` says it.

`start` hands back a `ForkedProcess`: the child's pid, its stdout and stderr as pipes, and `poll`, `wait`,
`communicate`, `send_signal` and `kill` as `subprocess.Popen` has them, so a test signals, stops and continues
the command's own process (its pid is the one the command records and names). Several may run at once: the
server forks each as it is asked and reports each exit as it happens. `run` starts one and waits for it.

What the child shares with the server is imported code only. No creditline module is imported before the
fork except `creditline.policy.hf` (transformers as creditline imports it, no settings), so every module that
reads its environment when imported (`creditline.faults` reads `CREDITLINE_FAULT`) reads the command's. The
libraries were imported under the server's environment: it is started with `OMP_NUM_THREADS=1`, as every
process of the fault tests runs (the checkpoints they compare depend on the thread count). So were the
interpreter's start-up settings: `PYTHONUNBUFFERED` in a command's environment changes nothing (the CLI flushes
each line a test reads while it runs). A command that ends without being killed ends as an interpreter does:
non-daemon threads joined, `atexit` functions run, output flushed.

The re-runs after a kill and `verify` stay in the test's process (`tests.e2e.cli`); a command that needs limits
of its own from its first instruction (`tests/faults/test_bad_input_limits.py`: an address-space limit the
server's imports would not fit) in a process of its own.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from creditline.liveness import stat_fields

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
import importlib, json, os, select, socket, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
assert "creditline.faults" not in sys.modules, "a preloaded module imported creditline.faults"
control = socket.socket(fileno=int(sys.argv[1]))  # SOCK_SEQPACKET: one message per request or answer
control.send(json.dumps({"ready": True}).encode())
children, listening = set(), True
while listening or children:
    ready, _, _ = select.select([control] if listening else [], [], [], 0.05)
    if ready:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 2)
        if not message:  # the test session closed its end: its commands end with it
            for pid in children:
                os.kill(pid, 9)
            listening = False
            continue
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            import atexit, runpy, threading, traceback
            control.close()
            os.chdir(request["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            os.close(fds[0])
            os.close(fds[1])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = request["argv"]  # run_module puts the module's path in sys.argv[0], as `python -m` does
            code = 0
            try:
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
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
        for fd in fds:  # the child's ends of its pipes are the child's alone: its exit is their end of file
            os.close(fd)
        children.add(pid)
        control.send(json.dumps({"pid": pid}).encode())
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            if listening:
                control.send(json.dumps({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())
"""


class PreloadedCli:
    """A server process with the libraries imported; `start` forks one `creditline` command from it, `run` forks
    one and waits for it."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen([sys.executable, "-c", SERVER, str(theirs.fileno()), *preload], cwd=ROOT,
                                        env=env, pass_fds=[theirs.fileno()])  # fmt: skip
        theirs.close()
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        assert self._answer(timeout_s=300) == {"ready": True}

    def start(self, *args: str, env: dict[str, str], module: str = "pipelines.cli") -> ForkedProcess:
        """`creditline ARGS` (`python -m MODULE ARGS`) with `env` as its whole environment (it must hold
        `OMP_NUM_THREADS=1`), running: its output comes through pipes, as `Popen(..., stdout=PIPE,
        stderr=PIPE, text=True)` gives it."""
        assert env.get("OMP_NUM_THREADS") == "1", "the libraries were imported with one thread"
        argv = ["creditline" if module == "pipelines.cli" else module, *args]
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "module": module}
        out, err = os.pipe(), os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._control, [json.dumps(request).encode()], [out[1], err[1]])
                pid = self._answer(timeout_s=30)["pid"]
        except BaseException:  # no child to read from
            os.close(out[0])
            os.close(err[0])
            raise
        finally:
            os.close(out[1])
            os.close(err[1])
        return ForkedProcess(self, pid, argv, out[0], err[0])

    def run(self, *args: str, env: dict[str, str], timeout_s: float = 600) -> subprocess.CompletedProcess:
        """`creditline ARGS` to its end: its exit code, stdout and stderr, as `subprocess.run(...,
        capture_output=True, text=True)` gives them. Killed at `timeout_s` (TimeoutError)."""
        process = self.start(*args, env=env)
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise TimeoutError(f"creditline {' '.join(args)} did not end within {timeout_s} s") from None
        return subprocess.CompletedProcess(["creditline", *args], process.returncode, out, err)

    def exit_code(self, pid: int, timeout_s: float | None) -> int | None:
        """The exit code of child `pid` once the server has reaped it, waiting up to `timeout_s` (None: for
        ever); None while it runs."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while pid not in self._exits:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._read(left) is None and left is not None and time.monotonic() >= deadline:
                    return None
            return self._exits[pid]

    def _answer(self, timeout_s: float) -> dict:
        """The server's next answer that is not a child's exit (those are kept for `exit_code`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._read(max(0.0, deadline - time.monotonic()))
            if message is None:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the preloaded server did not answer within {timeout_s} s")
                continue
            if "exited" not in message:
                return message

    def _read(self, timeout_s: float | None) -> dict | None:
        """One message of the server (a child's exit is recorded), or None if none came within `timeout_s`."""
        ready, _, _ = select.select([self._control], [], [], timeout_s)
        if not ready:
            return None
        data = self._control.recv(1 << 16)
        assert data, f"the preloaded server exited with {self._server.wait()}"
        message = json.loads(data)
        if "exited" in message:
            self._exits[message["exited"]] = message["returncode"]
        return message

    def killed_at(self, data_root: Path, fault: str, *args: str) -> subprocess.CompletedProcess:
        """`creditline ARGS` on `data_root`, armed to kill itself at the failpoint `fault` (`creditline.faults`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CREDITLINE_FAULT")}
        env |= {"CREDITLINE_DATA_ROOT": str(data_root), "OMP_NUM_THREADS": "1", "CREDITLINE_FAULT": fault}
        return self.run(*args, env=env)

    def close(self) -> None:
        """End the server: a command still running ends with it (SIGKILL), as the test session that started
        it has."""
        self._control.close()
        self._server.wait(timeout=60)


class ForkedProcess:
    """A command `PreloadedCli.start` forked: the parts of `subprocess.Popen` the fault tests use. `stdout` and
    `stderr` are text pipes; `returncode` is None until `poll` or `wait` sees the exit."""

    def __init__(self, cli: PreloadedCli, pid: int, args: list[str], stdout: int, stderr: int):
        self._cli, self.pid, self.args, self.returncode = cli, pid, args, None
        self.stdout = io.TextIOWrapper(open(stdout, "rb", -1))
        self.stderr = io.TextIOWrapper(open(stderr, "rb", -1))

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._cli.exit_code(self.pid, timeout_s=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._cli.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """All of stdout and stderr not yet read, to their end of file, then the exit (as `Popen.communicate`:
        what a `readline` buffered before is not returned again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {f.fileno(): [] for f in (self.stdout, self.stderr) if not f.closed}
        open_ = set(chunks)
        while open_:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(list(open_), [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd in ready:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if data:
                    chunks[fd].append(data)
                else:
                    open_.discard(fd)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        texts = [b"".join(chunks.get(f.fileno(), [])).decode(f.encoding, f.errors) if not f.closed else ""
                 for f in (self.stdout, self.stderr)]  # fmt: skip
        self.stdout.close()
        self.stderr.close()
        return texts[0], texts[1]

    def stopped(self) -> bool:
        """Whether the process is stopped (SIGSTOP: it reached a STOP failpoint), from /proc."""
        fields = stat_fields(self.pid)
        return fields is not None and fields[0] == "T"

    def wait_stopped(self, timeout: float = 300) -> None:
        """Return once the command has stopped itself at its STOP failpoint; fail with its output if it ends
        first, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.stopped():
            assert self.poll() is None, self.communicate()
            assert time.monotonic() < deadline, f"{self.args} never reached its failpoint"
            time.sleep(0.3)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # never a reaped pid, which another process may have by now
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
