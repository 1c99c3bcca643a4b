"""`TrackerResource`: MLflow as users expect it: one parent run per experiment, one child run per round.

- The experiment's parent run carries the round-level metrics (held-out success, return, reward and
  advantage statistics) with step = round, so the MLflow UI draws learning curves as lines.
- Each round is a nested child run (`mlflow.parentRunId`), created once: its id is recorded in the
  lineage store (`tracking_runs`) before anything is logged to it, so a re-run after a kill finds and
  reuses it. Assets log their metrics there, the trainer's per-update metrics as series (step = update).
- Every run is closed: the round's last stage sets the child and the parent FINISHED; a run whose
  process died is set KILLED by whoever reclaims it (`pipelines.reaper`); an asset that fails sets FAILED.
  Timestamps are the wall clock at logging time.

The embedded default is a sqlite tracking store under the data root with artifacts beside it; any
tracking server works through `tracking_uri`. MLflow creates and migrates that sqlite file on first use with
no lock: each process opens it once under the data root's first-start lock (`creditline.store.first_start`),
after dropping the `_alembic_tmp_*` tables a migration that lost such a race (or was killed) left behind.
A new root gets a copy of an empty store MLflow made once for its version (`resources.tracking_seed`).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import dagster as dg

from creditline.store import LineageStore
from creditline.store.first_start import first_start_lock
from creditline.store.rounds import EXPERIMENT_RUN_ROUND, record_tracking_run, round_commits, tracking_run_id
from resources.tracking_seed import seed_tracking_store

ROUND_TAG = "creditline.round"
EXPERIMENT_TAG = "creditline.experiment"
PARENT_TAG = "mlflow.parentRunId"
SERIES_MARK = ".update/"
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
"""MLflow 3's UI opens an experiment of this kind in its model-training view (runs, charts), not the GenAI
view of traces it guesses for an experiment without the tag."""
"""In the key of every per-update series (`<asset>.update/<metric>`, step = update index)."""
EXPERIMENT_RUN = "experiment"
"""ROUND_TAG value of the experiment's parent run."""


_RUN_IDS: dict[tuple[str, str, int], str] = {}
"""(catalog, experiment, round) -> MLflow run id, per process: recorded once in DuckDB, never changed."""
_CHECKED: set[tuple[str, str]] = set()
"""(catalog, run id) whose status this process has already checked (and reopened if needed)."""
_OPENED: set[str] = set()
"""Embedded tracking stores this process has opened (created, migrated) under the first-start lock."""
_EXPERIMENT_OF: dict[str, str] = {}
"""MLflow run id -> its experiment's id, as this process has learnt it (for links to the run's page)."""
ML_VIEW = "workflowType=machine_learning"
"""MLflow 3.17's UI opens in its GenAI view (traces) unless the page asks for the model-training one."""
MLFLOW_URL_ENV = "CREDITLINE_MLFLOW_URL"
"""Where a person opens MLflow's UI over the embedded store (default `make mlflow`'s address)."""
_LOGGED: dict[str, set[str]] = {}
"""MLflow run id -> the metric keys on it, as this process knows them: a run it created starts empty, any
other is read once from MLflow (what a killed attempt logged), and every `log` adds its keys."""


def _flatten(prefix: str, value, out: dict[str, str]) -> dict[str, str]:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = str(value)[:500]
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)


def _drop_abandoned_migration_tables(path: Path) -> None:
    """Drop the `_alembic_tmp_*` copies a migration killed or beaten by a racing first start left.

    Called under the first-start lock before MLflow opens the store: every migration of the embedded store
    runs under that lock, so none is in progress and the copies are rubbish (the next migration would trip
    over them).
    """
    import sqlite3

    if not path.exists():
        return
    temp_tables = (
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_alembic\\_tmp\\_%' ESCAPE '\\'"
    )
    with contextlib.closing(sqlite3.connect(path)) as con, con:
        names = [row[0] for row in con.execute(temp_tables)]
        for name in names:
            con.execute(f'DROP TABLE "{name}"')


class TrackerResource(dg.ConfigurableResource):
    data_root: str
    tracking_uri: str = ""
    """Empty: `sqlite:///<data_root>/mlflow.db`."""

    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{Path(self.data_root) / 'mlflow.db'}"

    def client(self):
        import mlflow  # imported here: ~1.5 s, and only the assets that log need it

        uri = self.uri()
        if not self.tracking_uri and uri not in _OPENED:
            with first_start_lock(self.data_root):
                path = Path(self.data_root) / "mlflow.db"
                _drop_abandoned_migration_tables(path)
                if not path.exists():  # a copy of the empty store, instead of MLflow's ~50 migrations
                    seed_tracking_store(path)
                mlflow.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # creates, migrates
            _OPENED.add(uri)
        # MLflow caches its tracking store per URI: after the first client, a new one costs ~3 ms.
        return mlflow.MlflowClient(tracking_uri=uri)

    def experiment_id(self, client, experiment: str) -> str:
        """The MLflow experiment named `experiment` (created with its artifacts under the data root, and
        tagged for the model-training view), its id."""
        found = client.get_experiment_by_name(experiment)
        if found is not None:
            for key, value in EXPERIMENT_TAGS.items():  # an experiment created before the tags had them
                if found.tags.get(key) != value:
                    client.set_experiment_tag(found.experiment_id, key, value)
            return found.experiment_id
        location = (Path(self.data_root) / "mlflow-artifacts" / experiment).as_uri()
        return client.create_experiment(experiment, artifact_location=location, tags=EXPERIMENT_TAGS)

    def _find_or_create(
        self,
        store: LineageStore,
        experiment: str,
        round_: int,
        recorded: str | None,
        tag: str,
        tags: dict,
        name: str,
        params: dict | None,
        unrecorded: list[str] | None = None,
    ) -> str:
        """The run `recorded` for (experiment, round) (recorded once, never changed: first writer wins), else
        one found by its tags, else a new one; the one recorded. With `unrecorded`, a run found or created is
        not recorded here but appended to it: the caller records it (`record_round_run`)."""
        key = (store.path, experiment, round_)
        if recorded is not None:
            _RUN_IDS[key] = recorded
            return recorded
        client = self.client()
        experiment_id = self.experiment_id(client, experiment)
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`{ROUND_TAG}` = '{tag}'", max_results=1
        )  # created by a process killed before it recorded the id
        run_id = found[0].info.run_id if found else None
        if run_id is not None:
            _EXPERIMENT_OF[run_id] = experiment_id
        if run_id is None:
            run_id = client.create_run(
                experiment_id, run_name=name, tags={**tags, ROUND_TAG: tag}
            ).info.run_id
            _EXPERIMENT_OF[run_id] = experiment_id
            _LOGGED[run_id] = set()  # new: nothing is logged on it yet
            _CHECKED.add((store.path, run_id))  # created RUNNING
            if params:
                from mlflow.entities import Param

                pairs = [Param(k, v) for k, v in sorted(_flatten("", params, {}).items())]
                for start in range(0, len(pairs), 100):
                    client.log_batch(run_id, params=pairs[start : start + 100])
        if unrecorded is not None:
            unrecorded.append(run_id)
            return run_id
        _RUN_IDS[key] = self.record_round_run(store, experiment, round_, run_id)
        return _RUN_IDS[key]

    def record_round_run(self, store: LineageStore, experiment: str, round_: int, run_id: str) -> str:
        """Record `run_id` as the round's run unless one is recorded (first writer wins); the one recorded.
        Not remembered here: inside a stage's records the record is not committed yet (`settle_round_run`
        remembers it after)."""
        return record_tracking_run(store, experiment, round_, run_id)

    def settle_round_run(
        self, store: LineageStore, experiment: str, round_: int, config: dict, mine: str, recorded: str
    ) -> str:
        """The round's run, once `record_round_run` recorded `recorded` for the run `round_run` left
        unrecorded (`mine`); talks to MLflow, so outside any lineage session. When another process recorded
        its own first, that one is checked and reopened as `round_run` does for a recorded run (it may have
        been closed FAILED since), and `mine`, to which nothing was logged, is closed KILLED, not left
        RUNNING."""
        if recorded == mine:
            _RUN_IDS[(store.path, experiment, round_)] = recorded
            return recorded
        self.close(mine, "KILLED")
        return self.round_run(store, experiment, round_, config)

    def experiment_run(self, store: LineageStore, experiment: str, config: dict) -> str:
        """The experiment's parent run (the config as its params), created on first use."""
        key = (store.path, experiment, EXPERIMENT_RUN_ROUND)
        recorded = _RUN_IDS.get(key) or tracking_run_id(store, experiment, EXPERIMENT_RUN_ROUND)
        return self._find_or_create(
            store,
            experiment,
            EXPERIMENT_RUN_ROUND,
            recorded,
            EXPERIMENT_RUN,
            {EXPERIMENT_TAG: experiment},
            experiment,
            config,
        )

    def round_run(
        self,
        store: LineageStore,
        experiment: str,
        round_: int,
        config: dict,
        unrecorded: list[str] | None = None,
    ) -> str:
        """The round's child run, created once; reopened (RUNNING) while an uncommitted round is worked on.

        A committed round's runs stay FINISHED: a re-score logs its comparison to them without reopening. The
        lineage is read in one session, once a round and process (the recorded run ids, whether the round is
        committed); MLflow's status only of a run this process did not create or has closed since.

        With `unrecorded`, a round run found or created here is appended to it instead of being recorded in a
        lineage session of its own: the caller records it in its next one (`record_round_run`, which returns
        the run recorded first, should another process have recorded one in between), then settles on the
        recorded one (`settle_round_run`). The stages do, in the session of their records: the first stage of
        a round opens one catalog connection fewer.
        """
        rounds = (EXPERIMENT_RUN_ROUND, round_)
        known = {r: _RUN_IDS.get((store.path, experiment, r)) for r in rounds}
        if all(rid is not None and (store.path, rid) in _CHECKED for rid in known.values()):
            return known[round_]
        with store.session():  # the lineage reads only
            recorded = {r: known[r] or tracking_run_id(store, experiment, r) for r in rounds}
            committed = round_ in round_commits(store, experiment)
        parent = self._find_or_create(
            store,
            experiment,
            EXPERIMENT_RUN_ROUND,
            recorded[EXPERIMENT_RUN_ROUND],
            EXPERIMENT_RUN,
            {EXPERIMENT_TAG: experiment},
            experiment,
            config,
        )
        run_id = self._find_or_create(
            store,
            experiment,
            round_,
            recorded[round_],
            str(round_),
            {EXPERIMENT_TAG: experiment, PARENT_TAG: parent},
            f"{experiment} round {round_}",
            None,
            unrecorded,
        )
        if not committed:
            for rid in (parent, run_id):
                if (store.path, rid) not in _CHECKED and self.status(rid) != "RUNNING":
                    self.client().update_run(rid, status="RUNNING")
        _CHECKED.update(
            (store.path, rid) for rid in (parent, run_id)
        )  # (re)opened, or the round is committed
        return run_id

    def log(
        self,
        run_id: str,
        metrics: dict[str, float] | None = None,
        tags: dict[str, str] | None = None,
        artifacts: list[str] | None = None,
        step: int = 0,
        series: dict[str, list[float]] | None = None,
    ) -> None:
        """Log metrics (at `step`, stamped now), tags, per-update `series` ({key: values}, step = index) and
        artifact files to a run: the metrics and tags in one batch (MLflow takes 1,000 metrics a batch)."""
        from mlflow.entities import Metric, RunTag

        client = self.client()
        stamp = _now_ms()
        points = [Metric(k, float(v), stamp, step) for k, v in (metrics or {}).items()]
        points += [
            Metric(k, float(v), stamp, i)
            for k, values in (series or {}).items()
            for i, v in enumerate(values)
        ]
        labels = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for start in range(0, max(len(points), 1), 1000):
            client.log_batch(run_id, metrics=points[start : start + 1000], tags=labels if start == 0 else [])
        if run_id in _LOGGED:
            _LOGGED[run_id].update(p.key for p in points)
        for path in artifacts or []:
            client.log_artifact(run_id, path)

    def run_url(self, run_id: str) -> str:
        """The run's page in MLflow's UI: the tracking server's own, or `make mlflow`'s over the embedded
        store (`$CREDITLINE_MLFLOW_URL` where it is served elsewhere)."""
        if run_id not in _EXPERIMENT_OF:
            _EXPERIMENT_OF[run_id] = self.client().get_run(run_id).info.experiment_id
        if self.tracking_uri.startswith(("http://", "https://")):
            base = self.tracking_uri
        else:
            base = os.environ.get(MLFLOW_URL_ENV, "http://127.0.0.1:5000")
        page = f"#/experiments/{_EXPERIMENT_OF[run_id]}/runs/{run_id}?{ML_VIEW}"
        return f"{base.rstrip('/')}/{page}"

    def logged_keys(self, run_id: str) -> set[str]:
        """Metric keys already on a run (a re-run after a kill does not log them twice): read from MLflow once
        per process and run, and for a run this process created, never."""
        if run_id not in _LOGGED:
            _LOGGED[run_id] = set(self.client().get_run(run_id).data.metrics)
        return set(_LOGGED[run_id])

    def logged_at_step(self, run_id: str, key: str, step: int) -> bool:
        return any(m.step == step for m in self.client().get_metric_history(run_id, key))

    def status(self, run_id: str) -> str:
        return self.client().get_run(run_id).info.status

    def close(self, run_id: str, status: str = "FINISHED") -> None:
        """Set a run FINISHED, FAILED or KILLED with the current time as its end time."""
        self.client().set_terminated(run_id, status)
        _CHECKED.difference_update(
            {checked for checked in _CHECKED if checked[1] == run_id}
        )  # no longer RUNNING


def check_writable(tracker: TrackerResource) -> None:
    """Refuse an embedded tracking store (`<data_root>/mlflow.db`) that exists but cannot be read or written
    (truncated, overwritten, read-only) before a round writes anything: otherwise the round would fail only
    once its rollouts are on disk. A cheap probe: sqlite's `quick_check`, then a write lock taken and
    released. A store not created yet is fine (MLflow creates it); a tracking server (`tracking_uri`) is not
    probed here. Raises `TrackingStoreError` naming the file."""
    import sqlite3

    from creditline.store.errors import TrackingStoreError

    path = Path(tracker.data_root) / "mlflow.db"
    if tracker.tracking_uri or not path.exists():
        return
    try:
        con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)
        try:
            verdict = con.execute("PRAGMA quick_check(1)").fetchone()[0]
            if verdict != "ok":
                raise sqlite3.DatabaseError(verdict)
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TrackingStoreError(
            str(path), str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ) from None
