"""A user's environment package (tests/plugins/countdown, installed by `make test`) runs rounds through the
real CLI, Dagster instance, DuckDB catalog and MLflow store, named by entry point and by import path,
without any change to creditline's code."""

from pathlib import Path

import pytest

from creditline.store import LineageStore, read_parquet
from e2e.cli import creditline

pytestmark = pytest.mark.slow
pytest.importorskip("creditline_countdown", reason="the test plugin is installed by `make test`")

SMALL = """
rounds = 2
[env]
name = "{name}"
params = {{ top = 5, max_steps = 6 }}
[rollouts]
tasks_per_round = 4
group_size = 4
[train]
epochs = 1
minibatches = 2
[eval]
num_tasks = 8
"""


def run(data_root: Path, config: Path, experiment: str, rounds: int):
    return creditline(
        data_root, "run", "--experiment", experiment, "--config", str(config), "--rounds", str(rounds)
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    data_root = folder / "data"
    by_name, by_path = folder / "by-name.toml", folder / "by-path.toml"
    by_name.write_text(SMALL.format(name="countdown"))
    by_path.write_text(SMALL.format(name="creditline_countdown:make_countdown"))
    for config, experiment, rounds in ((by_name, "countdown", 2), (by_path, "countdown-by-path", 1)):
        result = run(data_root, config, experiment, rounds)
        assert result.returncode == 0, result.stderr[-3000:]
    return LineageStore(data_root / "lineage.duckdb")


@pytest.mark.parametrize(("experiment", "rounds"), [("countdown", [1, 2]), ("countdown-by-path", [1])])
def test_a_plugin_environment_plays_whole_rounds_that_verify(finished, experiment, rounds):
    store = finished
    assert store.verify(experiment) == []
    assert [e.round for e in store.evaluations(experiment)] == [0, *rounds]
    for round_ in rounds:
        steps = read_parquet(store.artifact(experiment, round_, "steps").path)
        assert steps["observation"].str.fullmatch(r"at \d target \d").all()  # the plugin's own observations
        assert set(steps["action"]) <= {"more", "less", *steps["action"][~steps["valid_action"]]}
        assert steps["valid_action"].any()


def test_the_registered_config_keeps_the_name_it_was_given(finished):
    store = finished
    assert store.experiment_config("countdown")["env"]["name"] == "countdown"
    assert (
        store.experiment_config("countdown-by-path")["env"]["name"] == "creditline_countdown:make_countdown"
    )


def test_a_missing_plugin_is_one_clear_line_before_anything_is_registered(tmp_path):
    config = tmp_path / "missing.toml"
    config.write_text(SMALL.format(name="not_installed_pkg:make_env"))
    result = run(tmp_path / "data", config, "missing", 1)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f'error: {config}: env.name = "not_installed_pkg:make_env": cannot import module '
        "'not_installed_pkg': No module named 'not_installed_pkg'"
    ]
    assert (
        not (tmp_path / "data" / "lineage.duckdb").exists()
        or LineageStore(tmp_path / "data" / "lineage.duckdb").experiment_config("missing") is None
    )
