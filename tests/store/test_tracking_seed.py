"""A new data root's MLflow store is a copy of an empty store MLflow made (`resources.tracking_seed`), and it is
the store MLflow would have made there itself: the same schema, revision and rows, and it takes runs and metrics."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from resources.tracker import TrackerResource
from resources.tracking_seed import CACHE_ENV, is_sound, template_path

pytestmark = pytest.mark.slow  # MLflow makes stores (~2 s each): `make test`, not `make test-fast`


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """An empty template cache of the test's own."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _contents(db: Path) -> dict[str, object]:
    """What a store is: its schema (every table, index and trigger, as SQL), the file's settings, and the
    rows of every table, without the Default experiment's creation times."""
    with sqlite3.connect(db) as con:
        schema = sorted((kind, name, table, _clauses(sql))
                        for kind, name, table, sql in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))  # fmt: skip
        settings = {name: con.execute(f"PRAGMA {name}").fetchall()
                    for name in ("journal_mode", "page_size", "user_version", "application_id", "encoding")}  # fmt: skip
        rows = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            found = con.execute(f'SELECT * FROM "{table}"')
            columns = [c[0] for c in found.description]
            timed = [i for i, c in enumerate(columns) if c in ("creation_time", "last_update_time")]
            rows[table] = sorted(
                tuple(v for i, v in enumerate(row) if i not in timed) for row in found.fetchall()
            )
    return {"schema": schema, "settings": settings, "rows": rows}


def _clauses(sql: str | None) -> list[str]:
    """A CREATE statement's lines, sorted: MLflow's migrations do not always list a rebuilt table's constraints
    in one order (two stores its code made in one test process listed `runs`' in two)."""
    return sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())


def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path, cache):
    import mlflow

    made = tmp_path / "made"
    made.mkdir()
    mlflow.MlflowClient(f"sqlite:///{made / 'mlflow.db'}").search_experiments(max_results=1)  # MLflow alone
    seeded = tmp_path / "seeded"
    client = TrackerResource(data_root=str(seeded)).client()
    assert template_path().parent == cache and is_sound(template_path().read_bytes())
    assert _contents(seeded / "mlflow.db") == _contents(made / "mlflow.db")
    assert _contents(seeded / "mlflow.db")["rows"]["experiments"] != []  # Default, made at open

    experiment = client.create_experiment("seeded")
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "success", 0.5, step=1)
    client.set_terminated(run.info.run_id)
    again = TrackerResource(data_root=str(seeded)).client()
    assert [m.value for m in again.get_metric_history(run.info.run_id, "success")] == [0.5]


def test_a_second_root_copies_the_kept_template(tmp_path, cache):
    TrackerResource(data_root=str(tmp_path / "first")).client()
    kept = template_path().stat().st_ino
    TrackerResource(data_root=str(tmp_path / "second")).client()
    assert template_path().stat().st_ino == kept  # a template made again would have been renamed in
    with sqlite3.connect(tmp_path / "second" / "mlflow.db") as con:
        assert con.execute("SELECT count(*) FROM experiments").fetchone() == (1,)


@pytest.mark.parametrize("damage", ["not a database", "truncated", "no revision"])
def test_a_damaged_template_is_made_again(tmp_path, cache, damage):
    TrackerResource(data_root=str(tmp_path / "first")).client()
    sound = template_path().read_bytes()
    if damage == "not a database":
        template_path().write_bytes(b"not a database")
    elif damage == "truncated":
        template_path().write_bytes(sound[: len(sound) // 2])
    else:
        with sqlite3.connect(template_path()) as con:
            con.execute("DELETE FROM alembic_version")
    assert not is_sound(template_path().read_bytes())

    client = TrackerResource(data_root=str(tmp_path / "second")).client()
    assert client.search_experiments()[0].name == "Default"
    assert is_sound(template_path().read_bytes())


def test_a_cache_that_cannot_be_written_still_gives_the_root_its_store(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocked / "cache"))  # under a file: no folder can be made there
    client = TrackerResource(data_root=str(tmp_path / "root")).client()
    assert client.search_experiments()[0].name == "Default"
    assert not (blocked / "cache").exists()


def test_without_mlflows_table_maker_mlflow_creates_the_store_itself(tmp_path, cache, monkeypatch):
    import resources.tracking_seed

    def moved() -> bytes:  # a later MLflow without `_initialize_tables` where the template's maker imports it
        raise ImportError("cannot import name '_initialize_tables' from 'mlflow.store.db.utils'")

    monkeypatch.setattr(resources.tracking_seed, "_make_template", moved)
    client = TrackerResource(data_root=str(tmp_path / "root")).client()
    assert client.search_experiments()[0].name == "Default"
    assert not cache.exists()  # no template: nothing was copied, MLflow migrated the store
