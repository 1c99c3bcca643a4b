"""First starts at the same moment on an empty data root must not wedge it.

Dagster's sqlite storages and MLflow's sqlite store create and stamp their schema on first use, with no lock.
Before `creditline.store.first_start`, two `creditline register` started together left Dagster's run storage
with two `alembic_version` rows (every later command failed: "more than one head present"), and two
processes opening the MLflow store together failed in its migration ("_alembic_tmp_... already exists").
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from creditline.faults import FAULT_ENV
from creditline.store.orphans import find_orphans, remove_orphans
from resources.tracking_seed import CACHE_ENV, is_sound
from tests.e2e.cli import creditline
from tests.faults.preloaded import PreloadedCli

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
STARTS = 4
FIRST_OPEN = "tests.faults.first_open"
"""Opens a root's instance or tracking store, at a moment if given; forked from the preloaded server."""


def _open(cli: PreloadedCli, what: str, root: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Open `root`'s instance or tracking store in a process of its own (forked); (exit code, stderr)."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env = env | {"OMP_NUM_THREADS": "1"}
    process = cli.start(what, str(root), env=env, module=FIRST_OPEN)
    _, err = process.communicate(timeout=300)
    return process.returncode, err


def _together(cli: PreloadedCli, what: str, roots: list[Path], env: dict[str, str]) -> list[tuple[int, str]]:
    """Open each root at one wall-clock moment, a process each (forked: each imports what it opens first, then
    waits for the moment, so the race, not the imports, decides); (exit code, stderr) of each."""
    moment = str(time.time() + 5)
    env = env | {"OMP_NUM_THREADS": "1"}
    processes = [cli.start(what, str(root), moment, env=env, module=FIRST_OPEN) for root in roots]
    errors = [p.communicate(timeout=300)[1] for p in processes]
    return [(p.returncode, err) for p, err in zip(processes, errors, strict=True)]


def _stamps(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT version_num FROM alembic_version")]


def _tables(db: Path, like: str) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE name LIKE ?", [like])]


def test_instances_opened_at_one_moment_on_an_empty_root_leave_one_schema_stamp(tmp_path, preloaded_cli):
    results = _together(preloaded_cli, "instance", [tmp_path] * STARTS, env=dict(os.environ))
    assert [code for code, _ in results] == [0] * STARTS, [err[-400:] for _, err in results]
    databases = sorted((tmp_path / "dagster_home").rglob("*.db"))
    assert databases and all(len(_stamps(db)) == 1 for db in databases), {
        str(d): _stamps(d) for d in databases
    }


def test_simultaneous_first_tracker_opens_all_succeed(tmp_path, preloaded_cli):
    """Two roots, each opened by two processes at once, with no template of the empty store in the cache yet:
    the two roots' first starts make it at the same moment (resources.tracking_seed; a kept template is
    copied in tests/store/test_tracking_seed.py)."""
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    roots = [tmp_path / "root0", tmp_path / "root1"]
    results = _together(preloaded_cli, "tracker", [roots[i % 2] for i in range(STARTS)], env=env)
    assert [code for code, _ in results] == [0] * STARTS, [err[-400:] for _, err in results]
    for root in roots:
        assert len(_stamps(root / "mlflow.db")) == 1
        assert _tables(root / "mlflow.db", "\\_alembic\\_tmp%") == []
        assert find_orphans(root) == []
    (kept,) = (tmp_path / "cache").iterdir()
    assert is_sound(kept.read_bytes())


def test_a_first_start_killed_while_copying_the_store_is_completed_by_the_next(tmp_path, preloaded_cli):
    """SIGKILL after the empty store's copy is written under its temp name, before its rename: no `mlflow.db`,
    a temp file its dead writer left (`creditline.store.orphans`), and the next first start makes the store."""
    root = tmp_path / "root"
    code, err = _open(preloaded_cli, "tracker", root, env={**os.environ, FAULT_ENV: "write:mlflow.db"})
    assert code == -signal.SIGKILL, err[-2000:]
    assert not (root / "mlflow.db").exists()
    (orphan,) = find_orphans(root)
    assert Path(orphan.target) == root / "mlflow.db" and orphan.action == "delete"

    code, err = _open(preloaded_cli, "tracker", root)
    assert code == 0, err
    assert len(_stamps(root / "mlflow.db")) == 1
    assert [o.path for o in remove_orphans(root)] == [orphan.path] and find_orphans(root) == []


def test_a_root_wedged_by_an_old_race_is_repaired_with_one_line(tmp_path, preloaded_cli):
    first = creditline(tmp_path, "register", "--experiment", "wedged", "--config", str(TINY))
    assert first.returncode == 0, first.stderr
    runs_db = tmp_path / "dagster_home" / "history" / "runs.db"
    (head,) = _stamps(runs_db)
    code, err = _open(preloaded_cli, "tracker", tmp_path)
    assert code == 0, err
    with sqlite3.connect(
        runs_db
    ) as con:  # what the losing first start stamped: Dagster's last known revision
        con.execute("INSERT INTO alembic_version VALUES ('5771160a95ad')")
    with sqlite3.connect(tmp_path / "mlflow.db") as con:  # and a migration that lost its race left its copy
        con.execute("CREATE TABLE _alembic_tmp_runs (run_uuid VARCHAR(32))")

    again = creditline(tmp_path, "register", "--experiment", "wedged", "--config", str(TINY))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == (
        f"repaired {runs_db}: two first starts had stamped it twice ({', '.join(sorted([head, '5771160a95ad']))}); "
        f"kept {head}, the revision its tables were created at"
    )
    assert _stamps(runs_db) == [head]
    code, err = _open(preloaded_cli, "tracker", tmp_path)
    assert code == 0, err
    assert _tables(tmp_path / "mlflow.db", "\\_alembic\\_tmp%") == []
