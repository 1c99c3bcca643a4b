"""A server that the deployment names but that does not answer: one line naming the setting and the address
(password hidden), exit 2, and nothing written under the data root."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.servers import free_port


@pytest.mark.parametrize(
    ("section", "value", "named"),
    [
        (
            "[lineage]\ncatalog",
            "postgresql://me:secret@127.0.0.1:{port}/lineage",
            "[lineage] catalog postgresql://me:***@127.0.0.1:{port}/lineage",
        ),
        (
            "[dagster]\npostgres_url",
            "postgresql://me@127.0.0.1:{port}/dagster",
            "[dagster] postgres_url postgresql://me@127.0.0.1:{port}/dagster",
        ),
        ("[tracking]\nuri", "http://127.0.0.1:{port}", "[tracking] uri http://127.0.0.1:{port}"),
    ],
)
def test_an_unreachable_store_is_one_line_naming_it(tmp_path, section, value, named):
    port = free_port()  # nothing listens there
    deployment = tmp_path / "deployment.toml"
    deployment.write_text(f'{section.format(port=port)} = "{value.format(port=port)}"\n')
    data_root = tmp_path / "data"
    env = {**os.environ, "CREDITLINE_DEPLOYMENT": str(deployment), "CREDITLINE_DATA_ROOT": str(data_root)}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--rounds", "1"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: deployment {deployment}: {named.format(port=port)} is unreachable"
    )
    assert "secret" not in done.stderr
    assert not data_root.exists() or not any(data_root.iterdir())


def test_an_unreachable_generation_replica_is_one_line_naming_it(tmp_path):
    port = free_port()  # nothing listens there
    deployment = tmp_path / "deployment.toml"
    deployment.write_text(f'[generation]\nendpoints = ["http://127.0.0.1:{port}"]\n')
    data_root = tmp_path / "data"
    env = {**os.environ, "CREDITLINE_DEPLOYMENT": str(deployment), "CREDITLINE_DATA_ROOT": str(data_root)}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--rounds", "1"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: deployment {deployment}: [generation] endpoints http://127.0.0.1:{port} is unreachable"
    )
    assert not data_root.exists() or not any(data_root.iterdir())


@pytest.mark.parametrize("endpoint", ["refuses", "never answers"])
def test_an_unreachable_object_store_is_one_line_naming_it(tmp_path, postgres, endpoint):
    """The catalog answers, the S3 endpoint does not: the line names [storage], and the process ends once it is
    printed (the probe runs in a daemon thread: a client still retrying must not keep it alive)."""
    import socket

    silent = socket.socket()  # "never answers": connections are accepted by the kernel, nothing replies
    silent.bind(("127.0.0.1", 0))
    if endpoint == "never answers":
        silent.listen(8)
    port = silent.getsockname()[1]
    deployment = tmp_path / "deployment.toml"
    catalog = postgres.create_database(f"unreachable_storage_{endpoint.replace(' ', '_')}")
    deployment.write_text(f'[lineage]\ncatalog = "{catalog}"\n'
                          f'[storage]\nuri = "s3://bucket/prefix"\noptions = {{endpoint_url = "http://127.0.0.1:{port}"}}\n')  # fmt: skip
    env = {
        **os.environ,
        "CREDITLINE_DEPLOYMENT": str(deployment),
        "CREDITLINE_DATA_ROOT": str(tmp_path / "data"),
    }
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "report"], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    silent.close()
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: deployment {deployment}: [storage] uri s3://bucket/prefix is unreachable"
    )


def test_serve_and_verify_do_not_wait_for_the_generation_replicas(tmp_path):
    """`serve` may be starting one of the replicas the deployment names, and `verify` needs none: a replica that
    is down stops only `run`. Here `verify` goes on to its own answer (the experiment is unknown)."""
    port = free_port()
    deployment = tmp_path / "deployment.toml"
    deployment.write_text(f'[generation]\nendpoints = ["http://127.0.0.1:{port}"]\n')
    env = {
        **os.environ,
        "CREDITLINE_DEPLOYMENT": str(deployment),
        "CREDITLINE_DATA_ROOT": str(tmp_path / "data"),
    }
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "verify", "--experiment", "nothing"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "unreachable" not in done.stderr
    assert "--experiment 'nothing'" in done.stderr
