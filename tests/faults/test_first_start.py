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
import subprocess
import sys
import time
from pathlib import Path

import pytest

from creditline.faults import FAULT_ENV
from creditline.store.orphans import find_orphans, remove_orphans
from resources.tracking_seed import CACHE_ENV, is_sound
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
STARTS = 4
OPEN_TRACKER = "from resources.tracker import TrackerResource; import sys; " \
               "TrackerResource(data_root=sys.argv[1]).client().search_experiments(max_results=1)"  # fmt: skip
AT_ONCE = (
    "import sys, time; from {module} import {name}; time.sleep(max(0, float(sys.argv[2]) - time.time())); "
)
"""Imported first, then started at one wall-clock moment (argv[2]): the race, not the imports, decides."""
OPEN_INSTANCE = AT_ONCE.format(module="pipelines.instance", name="get_instance") + "get_instance(sys.argv[1])"
OPEN_TRACKER_AT_ONCE = AT_ONCE.format(module="resources.tracker", name="TrackerResource") + \
    "TrackerResource(data_root=sys.argv[1]).client().search_experiments(max_results=1)"  # fmt: skip


def _together(*commands: list[str], env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """Start the commands at once; wait for all."""
    processes = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for c in commands]  # fmt: skip
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=300), *p.communicate()) for p in processes]


def _stamps(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT version_num FROM alembic_version")]


def _tables(db: Path, like: str) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE name LIKE ?", [like])]


def test_instances_opened_at_one_moment_on_an_empty_root_leave_one_schema_stamp(tmp_path):
    moment = str(time.time() + 12)  # after every interpreter has imported Dagster, on a loaded machine too
    results = _together(*([sys.executable, "-c", OPEN_INSTANCE, str(tmp_path), moment] for _ in range(STARTS)),
                        env=dict(os.environ))  # fmt: skip
    assert [r.returncode for r in results] == [0] * STARTS, [r.stderr[-400:] for r in results]
    databases = sorted((tmp_path / "dagster_home").rglob("*.db"))
    assert databases and all(len(_stamps(db)) == 1 for db in databases), {
        str(d): _stamps(d) for d in databases
    }


def test_simultaneous_first_tracker_opens_all_succeed(tmp_path):
    """Two roots, each opened by two processes at once, with no template of the empty store in the cache yet:
    the two roots' first starts make it at the same moment (resources.tracking_seed; a kept template is
    copied in tests/store/test_tracking_seed.py)."""
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    roots = [tmp_path / "root0", tmp_path / "root1"]
    moment = str(time.time() + 12)
    results = _together(*([sys.executable, "-c", OPEN_TRACKER_AT_ONCE, str(roots[i % 2]), moment]
                          for i in range(STARTS)), env=env)  # fmt: skip
    assert [r.returncode for r in results] == [0] * STARTS, [r.stderr[-400:] for r in results]
    for root in roots:
        assert len(_stamps(root / "mlflow.db")) == 1
        assert _tables(root / "mlflow.db", "\\_alembic\\_tmp%") == []
        assert find_orphans(root) == []
    (kept,) = (tmp_path / "cache").iterdir()
    assert is_sound(kept.read_bytes())


def test_a_first_start_killed_while_copying_the_store_is_completed_by_the_next(tmp_path):
    """SIGKILL after the empty store's copy is written under its temp name, before its rename: no `mlflow.db`,
    a temp file its dead writer left (`creditline.store.orphans`), and the next first start makes the store."""
    root = tmp_path / "root"
    killed = subprocess.run([sys.executable, "-c", OPEN_TRACKER, str(root)], env={**os.environ,
                            FAULT_ENV: "write:mlflow.db"}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (root / "mlflow.db").exists()
    (orphan,) = find_orphans(root)
    assert Path(orphan.target) == root / "mlflow.db" and orphan.action == "delete"

    subprocess.run([sys.executable, "-c", OPEN_TRACKER, str(root)], check=True, timeout=300)
    assert len(_stamps(root / "mlflow.db")) == 1
    assert [o.path for o in remove_orphans(root)] == [orphan.path] and find_orphans(root) == []


def test_a_root_wedged_by_an_old_race_is_repaired_with_one_line(tmp_path):
    first = creditline(tmp_path, "register", "--experiment", "wedged", "--config", str(TINY))
    assert first.returncode == 0, first.stderr
    runs_db = tmp_path / "dagster_home" / "history" / "runs.db"
    (head,) = _stamps(runs_db)
    subprocess.run([sys.executable, "-c", OPEN_TRACKER, str(tmp_path)], check=True)
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
    subprocess.run([sys.executable, "-c", OPEN_TRACKER, str(tmp_path)], check=True)
    assert _tables(tmp_path / "mlflow.db", "\\_alembic\\_tmp%") == []
