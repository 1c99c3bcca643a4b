"""The Makefile's verbs use the data root the user named: `CREDITLINE_DATA_ROOT` from the environment, else
./creditline-data, the CLI's own default (`make -n` prints the commands without running them)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(*targets: str, data_root: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("CREDITLINE_DATA_ROOT", "MAKEFLAGS", "MFLAGS")}
    if data_root is not None:
        env["CREDITLINE_DATA_ROOT"] = data_root
    done = subprocess.run(["make", "-n", "--no-print-directory", *targets], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", ["ui", "mlflow"])
def test_the_ui_targets_open_the_data_root_in_the_environment(tmp_path, target):
    shown = dry_run(target, data_root=str(tmp_path / "elsewhere"))
    assert str(tmp_path / "elsewhere") in shown
    assert "creditline-data" not in shown


def test_a_relative_data_root_is_made_absolute_and_the_default_is_the_clis():
    assert f"sqlite:///{ROOT}/runs/mlflow.db" in dry_run("mlflow", data_root="runs")
    assert f"DAGSTER_HOME={ROOT}/creditline-data/dagster_home" in dry_run("ui", data_root=None)
