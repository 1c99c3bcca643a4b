"""A server that the deployment names but that does not answer: one line naming the setting and the address
(password hidden), exit 2, and nothing written under the data root."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.servers import free_port


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (
            '[lineage]\ncatalog = "postgresql://me:secret@127.0.0.1:{port}/lineage"',
            "[lineage] catalog postgresql://me:***@127.0.0.1:{port}/lineage",
        ),
        (
            '[dagster]\npostgres_url = "postgresql://me@127.0.0.1:{port}/dagster"',
            "[dagster] postgres_url postgresql://me@127.0.0.1:{port}/dagster",
        ),
        ('[tracking]\nuri = "http://127.0.0.1:{port}"', "[tracking] uri http://127.0.0.1:{port}"),
        (
            '[generation]\nendpoints = ["http://127.0.0.1:{port}"]',
            "[generation] endpoints http://127.0.0.1:{port}",
        ),
    ],
)
def test_an_unreachable_store_is_one_line_naming_it(tmp_path, setting, named):
    port = free_port()  # nothing listens there
    deployment = tmp_path / "deployment.toml"
    deployment.write_text(setting.format(port=port) + "\n")
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
