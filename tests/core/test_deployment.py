"""The deployment file: what it switches, and one clear line for each way it can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from creditline.config.deployment import Deployment, DeploymentError, load_deployment, redact

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployment" / "deployment.toml"


def test_no_file_is_the_local_profile(monkeypatch):
    monkeypatch.delenv("CREDITLINE_DEPLOYMENT", raising=False)
    local = load_deployment()
    assert local == Deployment() and local.profile == "local"
    assert (local.lineage.catalog, local.tracking.uri, local.dagster.executor, local.dagster.gpus) == (
        "",
        "",
        "in_process",
        1,
    )


def test_the_example_deployment_reads_as_written(monkeypatch):
    monkeypatch.setenv("CREDITLINE_DEPLOYMENT", str(EXAMPLE))
    server = load_deployment()
    assert server.profile == "server" and server.source == str(EXAMPLE)
    assert server.dagster.executor == "multiprocess" and server.dagster.gpus == 4
    assert server.lineage.catalog.startswith("postgresql://") and server.tracking.uri == "http://mlflow:5000"
    assert server.storage.uri == "s3://creditline/artifacts" and server.storage.options == {
        "endpoint_url": "http://minio:9000"
    }


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "[lineage]\ncatalg = 'x'\n",
            'lineage.catalg = "x": unknown key (did you mean catalog?); known keys: catalog',
        ),
        (
            "[cluster]\nnodes = 2\n",
            "cluster = { nodes = 2 }: unknown key; known keys: dagster, generation, lineage, storage, tracking, "
            "training",
        ),
        (
            "source = 'x'\n",
            'source = "x": unknown key; known keys: dagster, generation, lineage, storage, '
            "tracking, training",
        ),  # fmt: skip
        ("lineage = 'x'\n", 'lineage = "x": must be a table with keys catalog'),
        (
            "[lineage]\ncatalog = 'postgresql://db/l'\n[storage]\nuri = 's3://b'\noptions = 'x'\n",
            'storage.options = "x": must be a table of parameters',
        ),
        (
            "[storage]\nuri = 's3://b'\n",
            'storage.uri = "s3://b": needs lineage.catalog on Postgres: a DuckDB file would stay locked for every '
            "upload, and workers on other machines could not reach it",
        ),
        (
            "[dagster]\nexecutor = 'threads'\n",
            'dagster.executor = "threads": must be one of "celery", "in_process", "k8s", "multiprocess"',
        ),
        ("[dagster]\ngpus = 0\n", "dagster.gpus = 0: must be an integer ≥ 1"),
        ("[dagster]\nmax_concurrent = 2.5\n", "dagster.max_concurrent = 2.5: must be an integer ≥ 0"),
        ("[training]\nprocesses = '2'\n", 'training.processes = "2": must be an integer ≥ 1'),
        (
            "[training]\nprocesses = 2\nsharding = 'zero3'\n",
            'training.sharding = "zero3": must be one of "fsdp", "replicated"',
        ),
        (
            "[generation]\nendpoints = 'http://a:8000'\n",
            'generation.endpoints = "http://a:8000": must be a list of http(s):// URLs',
        ),
        (
            "[generation]\nendpoints = ['a:8000']\n",
            'generation.endpoints = ["a:8000"]: must be a list of http(s):// URLs',
        ),
        (
            "[generation]\nendpoints = ['http://a', 'http://a']\n",
            'generation.endpoints = ["http://a", "http://a"]: names a replica twice',
        ),
        (
            "[generation]\ntensor_parallel_size = 0\n",
            "generation.tensor_parallel_size = 0: must be an integer in 1..64",
        ),
        (
            "[training]\nsharding = 'fsdp'\n",
            'training.sharding = "fsdp": splits the model across training.processes: set processes ≥ 2',
        ),
        (
            "[lineage]\ncatalog = 'mysql://u:pw@h/db'\n",
            'lineage.catalog = "mysql://u:***@h/db": must be a postgresql:// URI',
        ),
        ("[tracking]\nuri = 5000\n", "tracking.uri = 5000: must be a string"),
    ],
)
def test_a_wrong_file_is_refused_in_one_line_naming_the_file_the_field_and_what_is_allowed(
    tmp_path, text, line
):
    path = tmp_path / "deployment.toml"
    path.write_text(text)
    with pytest.raises(DeploymentError) as info:
        load_deployment(path)
    assert info.value.problems == [f"deployment {path}: {line}"]


def test_every_problem_of_a_file_is_reported_together(tmp_path):
    path = tmp_path / "deployment.toml"
    path.write_text("[dagster]\ngpus = 0\nexecutor = 'threads'\n[tracking]\nurl = 'http://m'\n")
    with pytest.raises(DeploymentError) as info:
        load_deployment(path)
    assert [line.split(" = ", 1)[0] for line in info.value.problems] == [
        f"deployment {path}: dagster.executor",
        f"deployment {path}: dagster.gpus",
        f"deployment {path}: tracking.url",
    ]
    assert str(info.value) == "\n".join(info.value.problems)


def test_an_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "deployment.toml"
    path.write_text("[dagster\n")
    with pytest.raises(DeploymentError) as info:
        load_deployment(path)
    (line,) = info.value.problems
    assert line.startswith(f"deployment {path}: cannot be read: ")


def test_passwords_never_reach_a_message():
    assert redact("postgresql://me:secret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert redact("postgresql://me@db/x") == "postgresql://me@db/x"
    assert redact("http://mlflow:5000") == "http://mlflow:5000"


def test_the_deployments_tensor_parallelism_overrides_the_experiments(tmp_path):
    """A property of the machines, not of the experiment: the resource's vLLM settings take the deployment's
    tensor_parallel_size, and keep the experiment's when the deployment sets none (one rule for both:
    `creditline.config.TensorParallelSize`)."""
    from creditline.config import RolloutSettings
    from resources import deployed_resources

    path = tmp_path / "deployment.toml"
    path.write_text("[generation]\ntensor_parallel_size = 4\n")
    experiment = RolloutSettings(tensor_parallel_size=2, gpu_memory_utilization=0.7)
    deployed = deployed_resources(str(tmp_path), load_deployment(path))["engine"].vllm_settings(experiment)
    local = deployed_resources(str(tmp_path), Deployment())["engine"].vllm_settings(experiment)
    assert (deployed.tensor_parallel_size, deployed.gpu_memory_utilization) == (4, 0.7)
    assert (local.tensor_parallel_size, local.gpu_memory_utilization) == (2, 0.7)


def test_the_file_s_shardings_are_the_trainer_s():
    """Written out in the deployment schema, which must not import torch to read a file."""
    from typing import get_args

    from creditline.config.deployment import Sharding
    from creditline.train.distributed import SHARDINGS

    assert get_args(Sharding) == SHARDINGS
