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
    assert (local.catalog, local.tracking_uri, local.dagster.executor, local.dagster.gpus) == (
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
    assert server.catalog.startswith("postgresql://") and server.tracking_uri == "http://mlflow:5000"
    assert server.storage_uri == "s3://creditline/artifacts" and server.storage_options == {
        "endpoint_url": "http://minio:9000"
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[lineage]\ncatalg = 'x'\n", "[lineage] has no field 'catalg' (known: catalog)"),
        ("[cluster]\nnodes = 2\n", "unknown section [cluster]"),
        (
            "[lineage]\ncatalog = 'postgresql://db/l'\n[storage]\nuri = 's3://b'\noptions = 'x'\n",
            "[storage] options must be a table, not 'x'",
        ),
        ("[storage]\nuri = 's3://b'\n", "[storage] uri needs [lineage] catalog on Postgres"),
        ("[dagster]\nexecutor = 'threads'\n", "[dagster] executor 'threads' is not one of in_process"),
        ("[dagster]\ngpus = 0\n", "[dagster] gpus must be a whole number ≥ 1, not 0"),
        ("[training]\nprocesses = '2'\n", "[training] processes must be a whole number ≥ 1, not '2'"),
        (
            "[training]\nprocesses = 2\nsharding = 'zero3'\n",
            "[training] sharding 'zero3' is not one of replicated",
        ),
        (
            "[generation]\nendpoints = 'http://a:8000'\n",
            "[generation] endpoints must be a list of http(s):// URLs",
        ),
        (
            "[generation]\nendpoints = ['a:8000']\n",
            "[generation] endpoints must be a list of http(s):// URLs",
        ),
        (
            "[generation]\nendpoints = ['http://a', 'http://a']\n",
            "[generation] endpoints names a replica twice",
        ),
        (
            "[generation]\ntensor_parallel_size = -1\n",
            "[generation] tensor_parallel_size must be a whole number ≥ 0",
        ),
        (
            "[training]\nsharding = 'fsdp'\n",
            "[training] sharding fsdp splits the model across [training] processes",
        ),
        (
            "[lineage]\ncatalog = 'mysql://u:pw@h/db'\n",
            "[lineage] catalog must be a postgresql:// URI, not 'mysql://u:***@h/db'",
        ),
        ("[tracking]\nuri = 5000\n", "[tracking] uri must be a string, not 5000"),
        ("[dagster\n", "cannot be read"),
    ],
)
def test_a_wrong_file_is_refused_naming_the_file_and_the_field(tmp_path, text, message):
    path = tmp_path / "deployment.toml"
    path.write_text(text)
    with pytest.raises(DeploymentError) as info:
        load_deployment(path)
    assert str(info.value).startswith(f"deployment {path}: ") and message in str(info.value)
    assert "\n" not in str(info.value).strip()


def test_passwords_never_reach_a_message():
    assert redact("postgresql://me:secret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert redact("postgresql://me@db/x") == "postgresql://me@db/x"
    assert redact("http://mlflow:5000") == "http://mlflow:5000"


def test_the_deployments_tensor_parallelism_overrides_the_experiments(tmp_path):
    """A property of the machines, not of the experiment: the resource's vLLM settings take the deployment's
    tensor_parallel_size, and keep the experiment's when the deployment sets none."""
    from creditline.config import RolloutSettings
    from resources import deployed_resources

    path = tmp_path / "deployment.toml"
    path.write_text("[generation]\ntensor_parallel_size = 4\n")
    experiment = RolloutSettings(tensor_parallel_size=2, gpu_memory_utilization=0.7)
    deployed = deployed_resources(str(tmp_path), load_deployment(path))["engine"].vllm_settings(experiment)
    local = deployed_resources(str(tmp_path), Deployment())["engine"].vllm_settings(experiment)
    assert (deployed.tensor_parallel_size, deployed.gpu_memory_utilization) == (4, 0.7)
    assert (local.tensor_parallel_size, local.gpu_memory_utilization) == (2, 0.7)
