"""A real `dagster dev` (webserver + daemon): the sensor advances rounds, a backfill re-scores them.

The worker of the sensor's first run SIGKILLs itself mid-round, at the failpoint after its rollouts are
recorded (`CREDITLINE_FAULT` with `CREDITLINE_FAULT_ONCE`, so the retry's worker passes it; a kill from the
test raced the round, which could end before the test saw its rollouts): the run must be marked failed within a minute (by Dagster's run monitoring through our launcher, or by the sensor's reaper, whichever ticks
first) and the sensor must request the round again, which then completes.

Started by the test on 127.0.0.1 in its own session and stopped by PID. Everything goes through
GraphQL, as a user's clicks would: turn the sensor on, then launch a partition backfill of the
re-score branch (via `creditline rescore`, which finds the running webserver).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from creditline.credit.rubrics import RUBRICS
from creditline.faults import FAULT_ENV, ONCE_ENV, SIGNAL_ENV
from creditline.liveness import ProcessId
from creditline.store import LineageStore
from creditline.store.rounds import round_commits
from pipelines import dagster_client
from pipelines.instance import dagster_home
from pipelines.reaper import PROCESS_TAG

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "tiny_experiment.toml"
EXPERIMENT = "ui-maze"
BIN = Path(sys.executable).parent

START_SENSOR = """
mutation($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status } }
    ... on PythonError { message }
  }
}"""
REPOSITORIES = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } sensors { name } } } } }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; dagster dev log tail:\n"
                         + log.read_text()[-4000:])  # fmt: skip


@pytest.fixture()
def dagster_dev(tmp_path):
    data_root = tmp_path / "data"
    env = {  # the worker of the first run kills itself after its rollouts, with SIGKILL whatever the caller set
        **{k: v for k, v in os.environ.items() if k != SIGNAL_ENV},
        "CREDITLINE_DATA_ROOT": str(data_root),
        "DAGSTER_HOME": str(dagster_home(data_root)),
        FAULT_ENV: "recorded:rollouts",
        ONCE_ENV: str(tmp_path / "killed"),
    }
    port = free_port()
    log = tmp_path / "dagster_dev.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                                   cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: dagster_client.is_running(url), 120, "the webserver", log)
        yield url, data_root, env, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:  # idle, `dagster dev` stops in ~3 s; after the backfill it has waited out 30 s (nothing to keep)
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def the_killed_run(instance: dg.DagsterInstance, marker: Path, log: Path) -> tuple[str, float]:
    """The run whose worker killed itself at the failpoint, and when the test saw it (the marker file holds
    the worker's process id, written just before it was killed)."""

    def named() -> bool:
        try:
            return marker.exists() and ProcessId.parse(marker.read_text()) is not None
        except ValueError:  # created, not yet written
            return False

    wait_for(named, 300, "the first run's worker to be killed", log)
    seen = time.monotonic()
    process = marker.read_text()
    found: list = []

    def tagged() -> bool:
        found[:] = instance.get_runs(dg.RunsFilter(tags={PROCESS_TAG: process}))
        return bool(found)

    wait_for(tagged, 30, f"the run tagged with {process}", log)
    return found[0].run_id, seen


def run_failures(instance: dg.DagsterInstance, runs) -> str:
    """Each run's failure events (step and run), so a failed round says why in the test's output."""
    kinds = [dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE]
    lines = []
    for run in runs:
        lines.append(f"run {run.run_id[:8]} {run.tags.get('dagster/partition')} tags {dict(run.tags)}")
        for kind in kinds:
            for record in instance.get_records_for_run(run.run_id, of_type=kind).records:
                entry = record.event_log_entry
                error = entry.dagster_event.event_specific_data if entry.dagster_event else None
                lines.append(f"  {kind.value} {entry.step_key}: {entry.message} {error}")
    return "\n".join(lines)


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


def test_sensor_advances_two_rounds_and_a_backfill_rescores_them(dagster_dev):
    url, data_root, env, log = dagster_dev
    assert cli(env, "register", "--experiment", EXPERIMENT, "--config", str(TINY)).returncode == 0

    nodes = dagster_client.graphql(url, REPOSITORIES)["repositoriesOrError"]["nodes"]
    repo = next(n for n in nodes if any(s["name"] == "round_sensor" for s in n["sensors"]))
    selector = {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                "sensorName": "round_sensor"}  # fmt: skip
    started = dagster_client.graphql(url, START_SENSOR, {"selector": selector})["startSensor"]
    assert started["__typename"] == "Sensor" and started["sensorState"]["status"] == "RUNNING", started

    store = LineageStore(data_root / "lineage.duckdb")
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    killed, killed_at = the_killed_run(instance, Path(env[ONCE_ENV]), log)
    wait_for(lambda: instance.get_run_by_id(killed).status == dg.DagsterRunStatus.FAILURE, 60,
             "the killed run marked failed (run monitoring or the sensor)", log)  # fmt: skip
    assert time.monotonic() - killed_at < 60

    def two_rounds() -> bool:
        failed = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
        stepped = instance.get_records_for_run(killed, of_type=dg.DagsterEventType.STEP_FAILURE).records
        assert len(failed) == 1 and not stepped, "a round failed for a reason:\n" + run_failures(
            instance, failed
        )
        return sorted(round_commits(store, EXPERIMENT)) == [1, 2]

    wait_for(two_rounds, 600, "two rounds by the sensor", log)
    runs = instance.get_runs()
    assert sorted(r.tags.get("dagster/partition") for r in runs) == [
        "ui-maze.r001",
        "ui-maze.r001",
        "ui-maze.r002",
    ]
    assert all(PROCESS_TAG in r.tags for r in runs)  # every run worker named itself
    assert [r.run_id for r in runs if r.status == dg.DagsterRunStatus.FAILURE] == [killed]
    instance.dispose()

    version = RUBRICS["env-efficient"].version
    other = {
        **env,
        "CREDITLINE_DATA_ROOT": str(data_root.parent / "other"),
    }  # a root this webserver does not serve
    assert cli(other, "register", "--experiment", EXPERIMENT, "--config", str(TINY)).returncode == 0
    refused = cli(
        other, "rescore", "--experiment", EXPERIMENT, "--rubric", "env-efficient", "--dagster-url", url
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"serves data root {data_root}, not {data_root.parent / 'other'}" in refused.stderr

    launched = cli(
        env,
        "rescore",
        "--experiment",
        EXPERIMENT,
        "--rubric",
        "env-efficient",
        "--dagster-url",
        url,
        "--wait",
    )
    assert launched.returncode == 0 and "launched backfill" in launched.stdout, launched.stderr
    assert f"{url}/overview/backfills/" in launched.stdout
    rows = [line.split() for line in launched.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [row[:2] for row in rows] == [["1", version], ["2", version]], launched.stdout  # waited for both
    rescored = {
        a.round for a in store.artifacts(EXPERIMENT, kind="rescore_comparison") if a.variant == version
    }
    assert rescored == {1, 2}

    lineage = cli(env, "lineage", "--experiment", EXPERIMENT, "--json")
    assert lineage.returncode == 0, lineage.stderr
    report = json.loads(lineage.stdout)
    versions = {(a["round"], a["detail"].get("rubric_version")) for a in report["artifacts"]
                if a["kind"] in ("scores", "rescore_scores")}  # fmt: skip
    training = RUBRICS["env"].version
    assert versions == {(1, training), (2, training), (1, version), (2, version)}
    assert all(a["dagster_run_id"] for a in report["artifacts"] if a["round"] > 0)
    assert all(a["mlflow_run_id"] for a in report["artifacts"] if a["round"] > 0)
    verify = cli(env, "verify", "--experiment", EXPERIMENT)
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout
