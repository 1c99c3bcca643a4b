"""The round assets through Dagster in-process, on an ephemeral instance: data versions, blocking on bad data."""

import dagster as dg
import numpy as np
import pytest

from assets import round_key
from creditline.config import from_dict
from creditline.credit import rubrics
from creditline.store import LineageStore
from pipelines.definitions import ROUND_JOB, make_definitions

TINY = {"rollouts": {"tasks_per_round": 2, "group_size": 3}, "train": {"epochs": 1, "minibatches": 1},
        "eval": {"num_tasks": 4}}  # fmt: skip


def run_round(data_root, name, round_, instance, **overrides):
    store = LineageStore(data_root / "lineage.duckdb")
    store.register_experiment(name, from_dict({**TINY, "name": name, **overrides}).to_dict())
    key = round_key(name, round_)
    instance.add_dynamic_partitions("rounds", [key])
    job = make_definitions(str(data_root)).resolve_job_def(ROUND_JOB)
    return job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False), store


def test_data_versions_are_the_recorded_content_hashes(tmp_path):
    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "assets-ok", 1, instance)
        assert result.success
        for asset in ("episodes", "steps", "scores", "advantages", "checkpoint", "evaluation"):
            event = instance.get_latest_materialization_event(dg.AssetKey(asset))
            assert (
                event.asset_materialization.tags["dagster/data_version"]
                == store.artifact("assets-ok", 1, asset).content_hash
            )
        checks = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert len(checks) == 6 and all(e.event_specific_data.passed for e in checks)
        # where the credit went: a picture on the advantages materialisation and in the round's MLflow run
        shown = instance.get_latest_materialization_event(dg.AssetKey("advantages")).asset_materialization
        assert shown.metadata["credit_per_step"].value.startswith("![credit per step](data:image/png;base64,")
        logged = list((tmp_path / "mlflow-artifacts" / "assets-ok").rglob("credit.png"))
        assert (
            len(logged) == 1
            and logged[0].read_bytes() == (tmp_path / "assets-ok" / "r001" / "credit.png").read_bytes()
        )


def test_a_bad_score_table_stops_the_round_before_training(tmp_path, monkeypatch):
    def broken(steps):
        values = np.zeros(len(steps))
        values[1] = np.nan
        return values

    bad = rubrics.Rubric("env", (rubrics.Criterion("env_reward", broken, "step"),))
    monkeypatch.setitem(rubrics.RUBRICS, "env", bad)
    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "assets-bad", 1, instance)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert "criterion 'env_reward' gave a non-finite value at steps row 1" in str(
            failure.event_specific_data.error
        )
        kinds = {a.kind for a in store.artifacts("assets-bad", 1)}
        assert kinds == {"episodes", "steps"}  # nothing after the bad table was written or recorded
        assert store.artifact("assets-bad", 1, "checkpoint") is None
        assert not instance.get_latest_materialization_event(dg.AssetKey("checkpoint"))


@pytest.mark.parametrize("key", ["maze.r001", "a-b_c.r010"])
def test_round_keys_round_trip(key):
    from assets.partitions import parse_round_key

    experiment, round_ = parse_round_key(key)
    assert round_key(experiment, round_) == key


def test_the_experiment_chooses_its_estimator_and_lineage_and_mlflow_record_it(tmp_path):
    import mlflow

    from creditline.credit.advantages import params_hash

    params = {"mode": "mean_norm", "gamma": 0.9, "history_length": 1}
    with dg.instance_for_test() as instance:
        result, store = run_round(
            tmp_path, "assets-hgpo", 1, instance, advantages={"estimator": "hgpo", "params": params}
        )
        assert result.success
    record = store.artifact("assets-hgpo", 1, "advantages")
    assert record.meta["estimator"] == "hgpo" and record.meta["params"] == params
    assert record.meta["params_hash"] == params_hash("hgpo", params)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("assets-hgpo")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # MLflow's training view
    runs = client.search_runs([experiment.experiment_id])
    by_round = {r.data.tags["creditline.round"]: r for r in runs}
    assert sorted(by_round) == ["1", "experiment"]  # the experiment's parent run and the round's child
    assert by_round["experiment"].data.params["advantages.estimator"] == "hgpo"
    assert by_round["experiment"].data.params["advantages.params.history_length"] == "1"
    assert by_round["1"].data.tags["data_version.advantages"] == record.content_hash


def test_a_round_hashes_each_artifact_once_and_loads_each_model_once(tmp_path, monkeypatch):
    """Round 2, after round 1 in the same process: every file is hashed when it is written and once more by
    its blocking check, the parent checkpoint (hashed when round 1 wrote it) is trusted on its recorded
    size and mtime, and the parent is loaded by the trainer alone (the rollouts reuse the engine that
    round 1's evaluation loaded)."""
    from collections import Counter
    from pathlib import Path

    from creditline.policy import models as policy
    from creditline.store import files

    hashed: Counter[str] = Counter()
    loads: list[str] = []
    real_hash, real_load = files.hash_file, policy.load_policy
    with dg.instance_for_test() as instance:
        assert run_round(tmp_path, "once", 1, instance)[0].success
        monkeypatch.setattr(files, "hash_file", lambda p: hashed.update([str(p)]) or real_hash(p))

        def counted_load(folder, *args):
            loads.append(Path(folder).parent.name)
            return real_load(folder, *args)

        monkeypatch.setattr(policy, "load_policy", counted_load)  # the engines' and the trainer's
        result, store = run_round(tmp_path, "once", 2, instance)
    assert result.success
    round_dir = tmp_path / "once" / "r002"
    parent = tmp_path / "once" / "r001" / "policy"
    assert not [p for p in hashed if p.startswith(str(parent))]  # trusted: its fingerprint is unchanged
    written = [p for p in hashed if p.startswith(str(round_dir / "policy") + "/")]
    assert written and all(hashed[p] == 1 for p in written)  # the new checkpoint: once, when written
    for table in ("episodes", "steps", "scores", "advantages", "evaluation"):
        final = str(round_dir / f"{table}.parquet")
        temps = [p for p in hashed if Path(p).name.startswith(f".{table}.parquet.tmp-")]
        assert hashed[final] == 1 and len(temps) == 1, (table, hashed)  # written (as its temp) + its check
    assert loads == ["r001", "r002"]  # the trainer loads the parent; the evaluation the new checkpoint


def test_no_slow_work_runs_while_the_catalog_is_locked(tmp_path, monkeypatch):
    """A lineage session locks the DuckDB file against every other process (the sensor, the UI, another
    experiment's round, the lease heartbeat's thread): it may hold lineage calls only. Reading or writing a
    table, hashing, validating, MLflow and training all run outside it; rounds 1 (which builds the initial
    policy) and 2, through Dagster."""
    import importlib

    import mlflow
    import pyarrow.parquet as pq

    from creditline.store import connection, files

    locked_during: list[str] = []

    def watched(owner, name):
        real = getattr(owner, name)

        def call(*args, **kwargs):
            if connection.holding():
                locked_during.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, call)

    watched(files, "hash_file")
    watched(pq, "write_table")
    watched(pq, "read_table")
    for name in ("log_batch", "log_artifact", "get_run", "create_run", "set_terminated", "search_runs"):
        watched(mlflow.MlflowClient, name)
    persist = importlib.import_module("assets.stage")
    watched(persist, "validate")
    watched(importlib.import_module("creditline.round"), "train_policy")  # the assets import it when they run
    watched(importlib.import_module("creditline.policy.initial_policy"), "build_initial_policy")
    with dg.instance_for_test() as instance:
        for round_ in (1, 2):
            assert run_round(tmp_path, "unlocked", round_, instance)[0].success
    assert locked_during == []


def test_a_branched_round_records_its_continuations_in_lineage_and_the_ui(tmp_path):
    """A round with branching through Dagster: the continuations are rows of the round's tables, their links
    are recorded in the lineage store under the steps table's hash, and the steps materialisation shows them."""
    from creditline.rollout.branching import branch_links

    branching = {"points": "every", "every": 4, "continuations": 2}
    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "branched", 1, instance, branching=branching,
                                  advantages={"estimator": "mc_branch", "params": {}})  # fmt: skip
        assert result.success
        steps = store.artifact("branched", 1, "steps")
        table = __import__("pandas").read_parquet(steps.path)
        links = branch_links(table)
        assert links and store.branches(steps.content_hash) == links
        assert steps.meta["continuations"] == len(links) and steps.meta["branch_points"] * 2 == len(links)
        shown = instance.get_latest_materialization_event(dg.AssetKey("steps")).asset_materialization.metadata
        assert shown["continuations"].value == len(links)
        assert shown["branches"].value.startswith("| continuation | branch of episode | at step |")
        assert 0 < shown["continuation_token_share"].value < 1
        advantages = store.artifact("branched", 1, "advantages")
        assert advantages.meta["estimator"] == "mc_branch"


def test_a_filtered_round_records_the_episodes_it_filtered_on_and_the_share(tmp_path):
    """PROF reads the episodes' success: they are a parent of the advantages, and the UI shows the share dropped."""
    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "filtered", 1, instance,
                                  advantages={"estimator": "grpo", "params": {}, "sample_filter": "prof",
                                              "filter_remove": 1})  # fmt: skip
        assert result.success
        advantages = store.artifact("filtered", 1, "advantages")
        assert (
            dict(advantages.parents)[store.artifact("filtered", 1, "episodes").content_hash]
            == "computed_from"
        )
        shown = instance.get_latest_materialization_event(dg.AssetKey("advantages")).asset_materialization
        assert shown.metadata["filtered_share"].value == round(
            1 / 3, 4
        )  # 1 of each group's 3 episodes, as shown


def test_an_experiment_made_before_the_kind_tag_is_given_it(tmp_path):
    """MLflow 3 opens an untagged experiment in its GenAI view; the tracker tags one it finds without it."""
    from resources import TrackerResource

    tracker = TrackerResource(data_root=str(tmp_path))
    client = tracker.client()
    old = client.create_experiment("made-before")
    assert "mlflow.experimentKind" not in client.get_experiment(old).tags
    assert tracker.experiment_id(client, "made-before") == old
    assert client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_committed_round_fills_its_rubric_cell_links_mlflow_and_starts_the_curve_at_round_0(tmp_path):
    """What a user looks at after a round: the re-score grid's (round, training rubric) cell is materialised
    (not "missing" for ever), every asset links to the round's MLflow run, and the experiment's curves start
    at step 0 with the initial policy."""
    import mlflow

    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "looked-at", 1, instance)
        assert result.success
        version = store.artifact("looked-at", 1, "scores").meta["rubric_version"]
        cell = str(dg.MultiPartitionKey({"round": round_key("looked-at", 1), "rubric": version}))
        for asset in ("rescored_scores", "rescored_advantages"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {cell}
        client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        experiment_id = client.get_experiment_by_name("looked-at").experiment_id
        summary = instance.get_latest_materialization_event(
            dg.AssetKey("round_summary")
        ).asset_materialization
        parent = summary.metadata["mlflow_parent_run_id"].value
        round_run = summary.metadata["mlflow_run_id"].value
        base = f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs"
        view = "?workflowType=machine_learning"  # MLflow 3.17's model-training view, not its GenAI one
        assert summary.metadata["mlflow_run"].value == f"{base}/{round_run}{view}"
        assert summary.metadata["mlflow_experiment_run"].value == f"{base}/{parent}{view}"
        for asset in ("episodes", "scores", "advantages", "checkpoint", "evaluation"):
            shown = instance.get_latest_materialization_event(dg.AssetKey(asset)).asset_materialization
            assert shown.metadata["mlflow_run"].value == f"{base}/{round_run}{view}", asset
    curve = client.get_metric_history(parent, "evaluation/success_rate")
    initial = next(e for e in store.evaluations("looked-at") if e.round == 0)
    assert sorted(m.step for m in curve) == [0, 1]
    assert next(m.value for m in curve if m.step == 0) == initial.success_rate
