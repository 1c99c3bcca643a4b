"""Real servers for the tests, started on 127.0.0.1 by the tests themselves and stopped by PID.

- Postgres from Debian's `postgresql` package (`make test` installs it): a throwaway cluster (initdb, trust
  authentication, fsync off), run as the `postgres` user when the tests run as root (Postgres refuses root).
- An MLflow tracking server (`mlflow server`) with its runs in one of that cluster's databases.

A server that cannot start raises `ServerUnavailable` with the reason; the fixtures turn it into a skip that
says why, never a silent pass, or, under `make test` (which installs the servers and sets
`CREDITLINE_REQUIRE_SERVERS=1`), into a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ServerUnavailable(RuntimeError):
    pass


REQUIRE_ENV = "CREDITLINE_REQUIRE_SERVERS"


def unavailable(reason: str) -> None:
    """Skip the test saying why; fail it instead where the servers are required (`make test`)."""
    import pytest

    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (${REQUIRE_ENV}=1: the servers are required here)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait(ready, what: str, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailable(f"{what} exited with {process.returncode}: {log.read_text()[-500:]}")
        if ready():
            return
        time.sleep(0.2)
    stop_process(process)
    raise ServerUnavailable(f"{what} did not answer within {timeout_s:.0f} s: {log.read_text()[-500:]}")


@dataclass
class Postgres:
    port: int
    user: str = "postgres"

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URI."""
        import psycopg2

        con = psycopg2.connect(self.uri(), connect_timeout=5)
        con.autocommit = True
        with con.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        con.close()
        return self.uri(name)


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise ServerUnavailable("no Postgres server: apt-get install postgresql (`make test` does)")
    return Path(found[-1]).parent


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    bin_dir = _postgres_bin()
    as_root = os.geteuid() == 0
    owner = pwd.getpwnam("postgres") if as_root else None
    base = Path(tempfile.mkdtemp(prefix="creditline-pg-"))
    os.chmod(base, 0o755)
    if owner is not None:
        os.chown(base, owner.pw_uid, owner.pw_gid)

    def as_owner() -> None:
        os.setsid()
        if owner is not None:
            os.setgid(owner.pw_gid)
            os.setuid(owner.pw_uid)

    data, log = base / "data", base / "server.log"
    init = subprocess.run([bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                          preexec_fn=as_owner, capture_output=True, text=True)  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise ServerUnavailable(f"initdb failed: {init.stderr.strip()[-300:]}")
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [bin_dir / "postgres", "-D", data, "-p", str(port), "-c", "listen_addresses=127.0.0.1",
             "-c", f"unix_socket_directories={base}", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=300"],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=as_owner,
        )  # fmt: skip
    server = Postgres(port)
    try:
        _wait(lambda: _accepts(server), "postgres", process, log, 30)
        yield server
    finally:
        stop_process(process, signal.SIGINT)  # "fast" shutdown
        shutil.rmtree(base, ignore_errors=True)


def _accepts(server: Postgres) -> bool:
    import psycopg2

    try:
        psycopg2.connect(server.uri(), connect_timeout=2).close()
    except psycopg2.OperationalError:
        return False
    return True


MLFLOW_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
"""How the tests start `mlflow server` and `mlflow ui`, as `make mlflow` does: without MLflow's job runners (a
runner and seven Huey consumer processes for its GenAI jobs, which creditline never submits). An `mlflow ui`
took 51–54 s of CPU in its first 20 s with them, 12 s without, and answered in 12 s instead of 17 (idle
machine, 2026-11-27)."""


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path) -> Iterator[str]:
    """`mlflow server` on a free port, its runs in `backend_uri`; yields its http:// URI."""
    port = free_port()
    log = artifacts.parent / f"mlflow-{port}.log"
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [Path(sys.executable).parent / "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", backend_uri, "--artifacts-destination", artifacts.as_uri()]  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    with _serving(
        command, log, f"{uri}/health", "mlflow server", 90, env={**os.environ, **MLFLOW_SERVER_ENV}
    ):
        yield uri


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class S3:
    endpoint_url: str

    def bucket(self, name: str) -> str:
        """A new bucket; its s3:// URI."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")  # fmt: skip
        client.create_bucket(Bucket=name)
        return f"s3://{name}"


@contextlib.contextmanager
def s3_server(log_dir: Path) -> Iterator[S3]:
    """moto's S3-compatible server (`moto_server`, from the test extras) on a free port. Clients find the
    credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (any value: moto checks none), set here."""
    port = free_port()
    log = log_dir / f"moto-{port}.log"
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with open(log, "wb") as out:
        process = subprocess.Popen([Path(sys.executable).parent / "moto_server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    server = S3(f"http://127.0.0.1:{port}")
    try:
        _wait(lambda: _answers(f"{server.endpoint_url}/moto-api/"), "moto_server", process, log, 30)
        yield server
    finally:
        stop_process(process)


@contextlib.contextmanager
def _serving(
    command: list, log: Path, ready_url: str, what: str, timeout_s: float, **popen
) -> Iterator[None]:
    """Start `command` in its own session (output to `log`), wait until `ready_url` answers, stop it after."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen
        )
    try:
        _wait(lambda: _answers(ready_url), what, process, log, timeout_s)
        yield
    finally:
        stop_process(process)


@contextlib.contextmanager
def dagster_webserver(data_root: Path) -> Iterator[str]:
    """`dagster-webserver` over the data root's instance and the project's workspace (what `make ui` serves,
    without the daemon), on a free port; yields its http:// URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "CREDITLINE_DATA_ROOT": str(data_root),
        "DAGSTER_HOME": str(data_root / "dagster_home"),
    }
    command = [Path(sys.executable).parent / "dagster-webserver", "-w", "workspace.yaml", "-h", "127.0.0.1",
               "-p", str(port)]  # fmt: skip
    log = data_root / f"dagster-webserver-{port}.log"
    with _serving(command, log, f"{url}/server_info", "dagster-webserver", 120, cwd=ROOT, env=env):
        yield url


@contextlib.contextmanager
def mlflow_ui(data_root: Path) -> Iterator[str]:
    """`mlflow ui` over the data root's embedded tracking store (what `make mlflow` serves) on a free port.

    One worker, as `make mlflow` serves it: with more, uvicorn's supervisor kills a worker that has not answered
    its health ping within 5 s, and on a loaded machine a worker that is still importing MLflow never does (a
    fresh clone's `make test` once waited 90 s on workers killed and started again)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [Path(sys.executable).parent / "mlflow", "ui", "--backend-store-uri",
               f"sqlite:///{data_root / 'mlflow.db'}", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]  # fmt: skip
    log = data_root / f"mlflow-ui-{port}.log"
    with _serving(command, log, f"{url}/health", "mlflow ui", 90, env={**os.environ, **MLFLOW_SERVER_ENV}):
        yield url


def chromium() -> str:
    """Debian's headless-capable Chromium (`make test` installs it), or `unavailable`."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("no chromium on PATH (Debian's `chromium` package; `make test` installs it)")
    return str(found)
