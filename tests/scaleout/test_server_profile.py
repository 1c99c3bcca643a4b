"""Two experiments, two rounds each, at once, on the server profile: the Dagster instance, the lineage catalog
and MLflow on real servers started here, every step in a process of its own (the multiprocess executor).

What must hold with several writers on shared servers: every lineage row exactly once, every artifact's bytes
matching its recorded hash, `verify` clean, the rounds' runs in the MLflow server and the Dagster runs in
Postgres. The same experiment started twice at once runs once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from creditline.config.deployment import load_deployment
from creditline.store import LineageStore, hash_path
from creditline.store.rounds import round_commits

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
EXPERIMENTS = ("server-a", "server-b")
ROUND_KINDS = {"episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation"}


def creditline(data_root: Path, deployment: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(data_root), "CREDITLINE_DEPLOYMENT": str(deployment)}
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


@pytest.fixture(scope="module")
def servers(postgres, s3, tmp_path_factory):
    from tests.servers import ServerUnavailable, mlflow_server, unavailable

    base = tmp_path_factory.mktemp("server-profile")
    dagster_url, catalog = postgres.create_database("dagster"), postgres.create_database("lineage")
    try:
        backend = postgres.create_database("mlflow").replace("postgresql://", "postgresql+psycopg2://")
        with mlflow_server(backend, base / "mlflow-artifacts") as tracking:
            deployment = base / "deployment.toml"
            deployment.write_text(
                f'[dagster]\npostgres_url = "{dagster_url}"\nexecutor = "multiprocess"\nmax_concurrent = 2\ngpus = 2\n'
                f'[lineage]\ncatalog = "{catalog}"\n[tracking]\nuri = "{tracking}"\n'
                f'[storage]\nuri = "{s3.bucket("rounds")}/creditline"\noptions = {{endpoint_url = "{s3.endpoint_url}"}}\n'
            )
            yield base / "data", deployment
    except ServerUnavailable as error:
        unavailable(f"the MLflow server could not start: {error}")


@pytest.fixture(scope="module")
def finished(servers):
    """Both experiments, and the first one a second time, all started at once."""
    data_root, deployment = servers
    runs = [creditline(data_root, deployment, "run", "--experiment", name, "--config", str(TINY))
            for name in (*EXPERIMENTS, EXPERIMENTS[0])]  # fmt: skip
    outputs = [run.communicate(timeout=900) for run in runs]
    return (
        data_root,
        deployment,
        [(run.returncode, *output) for run, output in zip(runs, outputs, strict=True)],
    )


def test_both_experiments_ran_and_the_same_experiment_twice_at_once_had_one_winner(finished):
    """The experiment's lease is a row in the Postgres catalog: two `creditline run`s of one experiment race
    for it in transactions, and exactly one runs the rounds; the other stops with one line, having written nothing."""
    outcomes = finished[2]
    assert outcomes[1][0] == 0, outcomes[1][1][-2000:] + outcomes[1][2][-4000:]
    first, again = outcomes[0], outcomes[2]
    assert sorted([first[0], again[0]]) == [0, 2], first[2][-3000:] + again[2][-3000:]
    loser = first if first[0] == 2 else again
    assert "is being run by another `creditline run`" in loser[2] and "Traceback" not in loser[2]


def test_every_lineage_row_is_there_exactly_once_and_every_file_matches_its_hash(finished):
    data_root, deployment, _ = finished
    store = LineageStore(load_deployment(deployment).lineage.catalog, data_root=data_root)
    for experiment in EXPERIMENTS:
        for round_ in (1, 2):
            records = store.artifacts(experiment, round_)
            assert sorted(r.kind for r in records) == sorted(ROUND_KINDS)  # one each, none twice
            for record in records:
                assert record.path.startswith(str(data_root / experiment / f"r{round_:03d}"))
                assert hash_path(record.path) == record.content_hash
        assert sorted(round_commits(store, experiment)) == [1, 2]
        assert store.verify(experiment) == []
    duplicated = store.fetchall(
        "SELECT child_hash, parent_hash, count(*) FROM lineage GROUP BY ALL HAVING count(*) > 1"
    )
    assert duplicated == []


def test_every_artifact_is_in_object_storage_with_its_recorded_bytes(finished, tmp_path):
    """Each record names its object; fetched back from the S3 server, its bytes hash to the record's hash."""
    from creditline.store.objects import ObjectStore

    data_root, deployment, _ = finished
    settings = load_deployment(deployment)
    objects = ObjectStore(settings.storage.uri, str(data_root), settings.storage.options)
    store = LineageStore(settings.lineage.catalog)
    fetched = 0
    for experiment in EXPERIMENTS:
        for record in [store.initial_policy(experiment), *store.artifacts(experiment)]:
            uri = record.meta["object"]
            assert uri.startswith(settings.storage.uri)
            objects.fetch(uri, record.content_hash, tmp_path / f"{fetched}")
            fetched += 1
    assert fetched >= 2 * (1 + 2 * len(ROUND_KINDS))
    assert not [
        key for key in objects.filesystem().find(settings.storage.uri) if "/." in key
    ]  # no temporary key


def test_verify_is_clean_through_the_cli(finished):
    data_root, deployment, _ = finished
    for experiment in EXPERIMENTS:
        stdout, stderr = (
            check := creditline(data_root, deployment, "verify", "--experiment", experiment)
        ).communicate(timeout=300)
        assert check.returncode == 0, stdout + stderr


def test_the_rounds_are_runs_of_the_mlflow_server(finished):
    import mlflow

    _, deployment, _ = finished
    client = mlflow.MlflowClient(tracking_uri=load_deployment(deployment).tracking.uri)
    for experiment in EXPERIMENTS:
        found = client.get_experiment_by_name(experiment)
        assert found is not None
        runs = client.search_runs([found.experiment_id])
        assert len(runs) >= 2 and all(run.info.status == "FINISHED" for run in runs)


def test_the_dagster_runs_are_in_postgres_and_ran_their_steps_in_other_processes(finished):
    import dagster as dg
    from dagster._core.storage.event_log.base import EventRecordsFilter

    data_root, deployment, _ = finished
    os.environ["CREDITLINE_DEPLOYMENT"] = str(deployment)
    try:
        from pipelines.instance import get_instance

        instance = get_instance(data_root)
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        runs = instance.get_runs(dg.RunsFilter(job_name="round"))
        assert len(runs) == 4 and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        starts = instance.get_event_records(EventRecordsFilter(dg.DagsterEventType.STEP_START), limit=1000)
        pids = {record.event_log_entry.dagster_event.pid for record in starts}
        assert len(pids) > 4  # a process per step, not one per run
    finally:
        del os.environ["CREDITLINE_DEPLOYMENT"]
