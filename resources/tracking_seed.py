"""An empty MLflow tracking store at MLflow's schema head, made once per version, copied into new data roots.

MLflow creates a SQLite tracking store by creating its first schema and then running every Alembic migration
since, one transaction each. On 2026-11-27 (AMD EPYC, 2 cores, idle) that cost 1.4–1.9 s of CPU and 1.6–2.2 s
of wall time (6.3 s beside `make test`), and the first process of every data root paid it: the first round
of every experiment root, and most of the test suite's tests. What MLflow makes there depends only on the
versions of MLflow, SQLAlchemy and Alembic, not on the root. So it is made once per versions, in the user's
cache, by MLflow's own `_initialize_tables` (what its store runs on an empty database) on MLflow's own engine.
Each new root then gets a copy, written atomically (`creditline.store.files`).

MLflow opens the copy as it opens a store it made. It checks that the schema is at its head revision, and it
creates the Default experiment, which the template does not have: so the copy ends as the store MLflow makes
itself (tests/store/test_tracking_seed.py compares the two, schema, settings and rows).

A template that is not a sound SQLite file naming its revision is made again. Where the cache cannot be
written, the template is made for the one root; where MLflow no longer has the two functions, MLflow creates
the store itself, as before.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from creditline.store.files import write_bytes_atomic

CACHE_ENV = "CREDITLINE_CACHE_DIR"
"""Where the template is kept; default `$XDG_CACHE_HOME/creditline`, else `~/.cache/creditline`."""


def cache_dir() -> Path:
    if named := os.environ.get(CACHE_ENV):
        return Path(named)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "creditline"


def template_path() -> Path:
    """The template's file: one per versions of MLflow, SQLAlchemy and Alembic (the three that shape it)."""
    import alembic
    import mlflow
    import sqlalchemy

    versions = [f"{m.__name__}-{m.__version__}" for m in (mlflow, sqlalchemy, alembic)]
    return cache_dir() / f"tracking-store-{'-'.join(versions)}.db"


def seed_tracking_store(path: Path) -> None:
    """Write the empty store at MLflow's schema head to `path` (absent; the caller holds the data root's
    first-start lock). Where no template can be had, nothing is written: MLflow creates the store itself."""
    template = _template()
    if template is not None:
        write_bytes_atomic(template, path)


def _template() -> bytes | None:
    path = template_path()
    try:
        kept = path.read_bytes()
    except OSError:
        kept = b""
    if kept and is_sound(kept):
        return kept
    try:
        made = _make_template()
    except ImportError:  # MLflow moved the functions: let it create its store itself
        return None
    try:
        write_bytes_atomic(made, path)
    except OSError:  # a read-only or missing home: this root still gets its copy
        pass
    return made


def is_sound(data: bytes) -> bool:
    """Whether `data` is a SQLite database that passes `PRAGMA quick_check` and names a schema revision."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        checked = con.execute("PRAGMA quick_check").fetchall()
        revisions = con.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return checked == [("ok",)] and len(revisions) == 1


def _make_template() -> bytes:
    """An empty store made by MLflow's own code, in a temporary folder: its schema at head, no experiment."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine_with_retry

    with tempfile.TemporaryDirectory(prefix="creditline-tracking-") as folder:
        made = Path(folder) / "mlflow.db"
        engine = create_sqlalchemy_engine_with_retry(f"sqlite:///{made}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        return made.read_bytes()
