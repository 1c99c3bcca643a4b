"""Two tiny rounds through the real CLI, Dagster instance, DuckDB catalog and MLflow store."""

import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from creditline.round import training_rows
from creditline.store import LineageStore, hash_path
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
EXPERIMENT = "e2e-maze"
ROUND_KINDS = {"episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    data_root = tmp_path_factory.mktemp("data")
    result = creditline(data_root, "run", "--experiment", EXPERIMENT, "--rounds", "2", "--config", str(TINY))
    assert result.returncode == 0, result.stderr[-3000:]
    return data_root, result


def test_run_prints_progress_and_a_round_table(finished):
    _, result = finished
    assert "round   1/2" in result.stdout and "round   2/2" in result.stdout
    table = result.stdout.splitlines()[-3:]
    assert [int(line.split()[0]) for line in table] == [0, 1, 2]


def test_every_round_records_its_artifacts_with_hashes_matching_disk(finished):
    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    for round_ in (1, 2):
        records = store.artifacts(EXPERIMENT, round_)
        assert {r.kind for r in records} == ROUND_KINDS
        for record in records:
            assert hash_path(record.path) == record.content_hash
            assert record.path.startswith(str(data_root / EXPERIMENT / f"r{round_:03d}"))
    assert store.verify(EXPERIMENT) == []


def test_round_two_is_generated_by_round_one_and_round_one_by_the_initial_policy(finished):
    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    initial = store.initial_policy(EXPERIMENT)
    first, second = (store.artifact(EXPERIMENT, r, "checkpoint") for r in (1, 2))
    assert (initial.content_hash, "generated_by") in store.parents(
        store.artifact(EXPERIMENT, 1, "steps").content_hash
    )
    assert (first.content_hash, "generated_by") in store.parents(
        store.artifact(EXPERIMENT, 2, "steps").content_hash
    )
    assert store.artifact(EXPERIMENT, 2, "steps").meta["parent_checkpoint"] == first.content_hash
    assert (first.content_hash, "initialized_from") in store.parents(second.content_hash)
    assert len({initial.content_hash, first.content_hash, second.content_hash}) == 3


def test_mlflow_has_a_parent_run_with_curves_and_one_closed_child_run_per_round(finished):
    data_root, _ = finished
    import mlflow

    from creditline.store.rounds import tracking_runs

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{data_root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = {r.data.tags["creditline.round"]: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["1", "2", "experiment"]
    parent = runs.pop("experiment")
    store = LineageStore(data_root / "lineage.duckdb")
    assert tracking_runs(store, EXPERIMENT) == {0: parent.info.run_id, 1: runs["1"].info.run_id,
                                                2: runs["2"].info.run_id}  # fmt: skip
    curve = client.get_metric_history(parent.info.run_id, "evaluation/success_rate")
    evaluations = {e.round: e.success_rate for e in store.evaluations(EXPERIMENT)}
    # step 0 is the initial policy: the curve's baseline
    assert sorted((m.step, m.value) for m in curve) == [(r, evaluations[r]) for r in (0, 1, 2)]
    headline = ["evaluation/success_rate", "evaluation/mean_return"]
    assert list(parent.data.metrics)[:2] == headline  # listed first
    assert all(m.timestamp > 1_700_000_000_000 for m in curve)  # real wall-clock times, not 1970
    assert parent.info.status == "FINISHED" and parent.info.end_time is not None
    for round_, run in runs.items():
        assert run.info.status == "FINISHED" and run.info.end_time is not None
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert "evaluation/success_rate" in run.data.metrics
        assert run.data.params == {} and parent.data.params["advantages.estimator"] == "gigpo"
        assert (
            run.data.tags["data_version.evaluation"]
            == store.artifact(EXPERIMENT, int(round_), "evaluation").content_hash
        )
        assert "success_by_round.png" in [a.path for a in client.list_artifacts(run.info.run_id)]
        assert {r.mlflow_run_id for r in store.runs(EXPERIMENT, int(round_))} == {run.info.run_id}
        losses = client.get_metric_history(run.info.run_id, "checkpoint.update/loss")
        assert [m.step for m in losses] == [0, 1]  # one point per optimiser update (1 epoch × 2 minibatches)


def test_dagster_instance_shows_both_rounds_materialized(finished):
    data_root, _ = finished
    os.environ["DAGSTER_HOME"] = str(data_root / "dagster_home")
    with dg.DagsterInstance.get() as instance:
        keys = instance.get_materialized_partitions(dg.AssetKey("evaluation"))
        assert keys == {f"{EXPERIMENT}.r001", f"{EXPERIMENT}.r002"}
        store = LineageStore(data_root / "lineage.duckdb")
        for run in store.runs(EXPERIMENT):
            assert instance.get_run_by_id(run.dagster_run_id) is not None
        event = instance.get_latest_materialization_event(dg.AssetKey("steps"))
        assert (
            event.asset_materialization.tags["dagster/data_version"]
            == store.artifact(EXPERIMENT, 2, "steps").content_hash
        )


def test_report_json_lists_the_initial_policy_first(finished):
    data_root, _ = finished
    result = creditline(
        data_root, "report", "--experiment", EXPERIMENT, "--json", subprocess=True
    )  # as typed
    rows = json.loads(result.stdout)
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[0]["policy"] == "initial"
    assert all(0.0 <= r["success_rate"] <= 1.0 and "mean_return" in r for r in rows)


def test_lineage_shows_the_chain_back_to_the_initial_policy(finished):
    data_root, _ = finished
    result = creditline(data_root, "lineage", "--experiment", EXPERIMENT, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["round"] == 2 and report["all_match"]
    kinds = {(a["round"], a["kind"]) for a in report["artifacts"]}
    for round_ in (1, 2):
        assert {(round_, k) for k in ("checkpoint", "advantages", "scores", "steps", "episodes")} <= kinds
    assert (0, "checkpoint") in kinds
    advantages = next(a for a in report["artifacts"] if a["kind"] == "advantages")
    assert advantages["detail"]["estimator"] == "gigpo" and advantages["detail"]["params"]["gamma"] == 0.95
    scores = next(a for a in report["artifacts"] if a["kind"] == "scores")
    assert scores["detail"]["rubric_version"].startswith("env-")
    audited = report["artifacts"][0]  # the checkpoint itself: which rubric version and estimator made it
    assert audited["kind"] == "checkpoint" and audited["round"] == 2
    assert audited["detail"]["rubric_version"] == scores["detail"]["rubric_version"]
    assert (
        audited["detail"]["estimator"] == "gigpo"
        and audited["detail"]["params_hash"] == advantages["detail"]["params_hash"]
    )
    text = creditline(data_root, "lineage", "--experiment", EXPERIMENT).stdout
    assert "(initial policy)" in text and "all files match" in text
    assert max(map(len, text.splitlines())) <= 100
    assert len(text.splitlines()) == 2 + len(report["artifacts"]) + 1  # one line per artifact
    wide = creditline(data_root, "lineage", "--experiment", EXPERIMENT, "--wide").stdout
    assert all(a["path"] in wide for a in report["artifacts"]) and "  from: " in wide


def test_running_again_adds_nothing_and_a_changed_config_is_refused(finished, tmp_path):
    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    before = store.artifacts(EXPERIMENT)
    again = creditline(data_root, "run", "--experiment", EXPERIMENT, "--rounds", "2", "--config", str(TINY))
    assert again.returncode == 0, again.stderr
    assert store.artifacts(EXPERIMENT) == before
    changed = tmp_path / "changed.toml"
    changed.write_text(TINY.read_text().replace("group_size = 4", "group_size = 2"))
    refused = creditline(
        data_root, "run", "--experiment", EXPERIMENT, "--rounds", "2", "--config", str(changed)
    )
    assert refused.returncode == 2 and EXPERIMENT in refused.stderr
    assert store.artifacts(EXPERIMENT) == before


def test_verify_names_a_corrupted_artifact_and_fails(finished, tmp_path):
    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    target = Path(store.artifact(EXPERIMENT, 1, "scores").path)
    original = target.read_bytes()
    try:
        target.write_bytes(original[:-10] + b"corrupted!")
        result = creditline(data_root, "verify", "--experiment", EXPERIMENT)
        assert result.returncode == 1
        assert str(target) in result.stdout and "changed" in result.stdout
        lineage = creditline(data_root, "lineage", "--experiment", EXPERIMENT)
        assert lineage.returncode == 1 and "LINEAGE DOES NOT MATCH" in lineage.stdout
    finally:
        target.write_bytes(original)
    assert creditline(data_root, "verify", "--experiment", EXPERIMENT).returncode == 0


def test_a_copied_data_root_verifies_clean_and_audits_its_own_files(finished, tmp_path):
    data_root, _ = finished
    with duckdb.connect(str(data_root / "lineage.duckdb"), read_only=True) as con:
        absolute = con.execute("SELECT count(*) FROM artifacts WHERE path LIKE '/%'").fetchone()
    assert absolute == (0,)  # every artifact is under the data root: recorded relative to it
    copy = (tmp_path / "copy").resolve()
    shutil.copytree(data_root, copy, symlinks=True)
    verify = creditline(copy, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"checked {EXPERIMENT!r}: " in verify.stdout and "2 of 2 rounds committed" in verify.stdout
    assert verify.stdout.splitlines()[-1] == f"0 problem(s) in 1 experiment(s) ({EXPERIMENT})"
    lineage = creditline(copy, "lineage", "--experiment", EXPERIMENT, "--json")
    report = json.loads(lineage.stdout)
    assert lineage.returncode == 0 and report["all_match"]
    assert all(a["path"].startswith(f"{copy}/") for a in report["artifacts"])


def test_advantages_command_on_a_finished_rounds_files(finished, tmp_path):
    import numpy as np
    import pandas as pd

    from creditline.credit.advantages import compute

    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    steps, scores = (store.artifact(EXPERIMENT, 2, k).path for k in ("steps", "scores"))
    out = tmp_path / "adv.parquet"
    result = creditline(data_root, "advantages", "--estimator", "hgpo", "--param", "history_length=1",
                        "--param", "mode=\"mean_norm\"", "--steps", steps, "--scores", scores, "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    table = pd.read_parquet(out)
    assert len(table) == store.artifact(EXPERIMENT, 2, "steps").rows and "advantage" in table.columns
    expected = compute("hgpo", table, history_length=1, mode="mean_norm")
    assert np.allclose(table["advantage"], expected)
    # the same estimator as training reproduces the round's own advantages table
    gigpo = tmp_path / "gigpo.parquet"
    assert creditline(data_root, "advantages", "--estimator", "gigpo", "--param", "gamma=0.95", "--steps", steps,
                      "--scores", scores, "--out", str(gigpo)).returncode == 0  # fmt: skip
    recorded = pd.read_parquet(store.artifact(EXPERIMENT, 2, "advantages").path)
    merged = pd.read_parquet(gigpo).merge(recorded, on=["episode_id", "step_idx"], suffixes=("", "_recorded"))
    assert len(merged) == len(recorded)
    assert np.array_equal(merged["advantage"], merged["advantage_recorded"])  # exactly: one code path
    bad = creditline(
        data_root, "advantages", "--estimator", "nope", "--steps", steps, "--out", str(tmp_path / "x.parquet")
    )
    assert bad.returncode == 2 and "nope" in bad.stderr


def test_rescore_twice_gives_identical_hashes_and_no_duplicate_rows(finished):
    data_root, _ = finished
    first = creditline(
        data_root,
        "rescore",
        "--experiment",
        EXPERIMENT,
        "--rubric",
        "env-efficient",
        "--dagster-url",
        "http://127.0.0.1:9",
    )  # nothing listens there: runs in-process
    assert first.returncode == 0, first.stderr
    lines = [line.split() for line in first.stdout.splitlines()]
    assert [line[:2] for line in lines].count(["round", "rubric"]) == 1  # one header, then a line per round
    rows = [line for line in lines if line[:1] in (["1"], ["2"])]
    assert [row[0] for row in rows] == ["1", "2"]
    for _, _, reward, rank, flips, _ in rows:  # rounded: three places, "n/a" where undefined
        assert all(re.fullmatch(r"[+-]\d\.\d{3}|n/a", r) for r in (reward, rank)) and re.fullmatch(
            r"\d\.\d{3}", flips
        )
    store = LineageStore(data_root / "lineage.duckdb")
    kinds = ("rescore_scores", "rescore_advantages", "rescore_comparison")
    before = {(a.round, a.kind): a.content_hash for a in store.artifacts(EXPERIMENT) if a.kind in kinds}
    assert {r for r, _ in before} == {1, 2} and len(before) == 6
    second = creditline(data_root, "rescore", "--experiment", EXPERIMENT, "--rubric", "env-efficient", "--rounds", "1..2",
                        "--dagster-url", "http://127.0.0.1:9")  # fmt: skip
    assert second.returncode == 0, second.stderr
    after = {(a.round, a.kind): a.content_hash for a in store.artifacts(EXPERIMENT) if a.kind in kinds}
    assert after == before
    with duckdb.connect(str(data_root / "lineage.duckdb"), read_only=True) as con:
        assert (
            con.execute(
                "SELECT count(*) - count(DISTINCT (child_hash, parent_hash)) FROM lineage"
            ).fetchone()[0]
            == 0
        )
        dupes = con.execute("SELECT count(*) FROM (SELECT experiment, round, kind, variant, count(*) c FROM artifacts "
                            "GROUP BY ALL HAVING c > 1)").fetchone()[0]  # fmt: skip
        assert dupes == 0
    comparison = store.artifact(EXPERIMENT, 1, "rescore_comparison", store.artifact(EXPERIMENT, 1, "rescore_scores",
                                next(a.variant for a in store.artifacts(EXPERIMENT, 1, "rescore_scores"))).variant)  # fmt: skip
    assert 0.0 <= comparison.meta["sign_flip_share"] <= 1.0
    report = json.loads(creditline(data_root, "lineage", "--experiment", EXPERIMENT, "--json").stdout)
    versions = {
        a["detail"].get("rubric_version")
        for a in report["artifacts"]
        if a["kind"] in ("scores", "rescore_scores")
    }
    assert len(versions) == 2  # the training rubric and the re-scored one, side by side
    unknown = creditline(data_root, "rescore", "--experiment", EXPERIMENT, "--rubric", "nope")
    assert unknown.returncode == 2 and "nope" in unknown.stderr and "Traceback" not in unknown.stderr


def test_export_hands_the_rounds_per_token_advantages_to_prime_rl_and_verifiers(finished, tmp_path):
    from creditline.store import read_parquet

    data_root, _ = finished
    store = LineageStore(data_root / "lineage.duckdb")
    advantages = read_parquet(store.artifact(EXPERIMENT, 2, "advantages").path)
    trained = training_rows(read_parquet(store.artifact(EXPERIMENT, 2, "steps").path), advantages)
    by_step = {  # what the trainer packed: the step's advantage on each of its completion tokens
        (r.episode_id, r.step_idx): [float(a) for a in r.completion_advantages] for r in trained.itertuples()
    }
    for format_ in ("prime-rl", "pr941"):
        out = tmp_path / f"{format_}.jsonl"
        result = creditline(
            data_root, "export", "--experiment", EXPERIMENT, "--format", format_, "--out", str(out)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"of {EXPERIMENT} round 2 to {out}" in result.stdout  # the newest round by default
        records = [json.loads(line) for line in out.read_text().splitlines()]
        exported = {}
        if format_ == "prime-rl":  # plain prompts never chain: one sample per step, by episode id then step
            # a positional TrainingSample: token_ids, mask, logprobs, temperatures, env_name, ..., advantages
            for key, sample in zip(sorted(by_step), records, strict=True):
                exported[key] = [a for a, m in zip(sample[12], sample[1], strict=True) if m]
        else:
            assert len(records) == advantages["episode_id"].nunique()
            for rollout in records:
                for step in rollout["trajectory"]:
                    exported[(step["trajectory_id"], step["extras"]["step_idx"])] = step[
                        "completion_advantages"
                    ]
        assert exported == by_step  # exactly: JSON keeps every float bit
    missing = creditline(data_root, "export", "--experiment", EXPERIMENT, "--round", "7", "--format", "pr941",
                         "--out", str(tmp_path / "x.jsonl"))  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: --round 7: no advantages for it; rounds with advantages: 1..2"


def test_export_of_a_rescored_round_takes_the_rescored_advantages(finished, tmp_path):
    from creditline.credit.rubrics import RUBRICS
    from creditline.store import read_parquet

    data_root, _ = finished
    rescored = creditline(
        data_root, "rescore", "--experiment", EXPERIMENT, "--rubric", "env-efficient", "--rounds", "2"
    )
    assert rescored.returncode == 0, rescored.stderr[-3000:]  # idempotent if an earlier test did it
    version = RUBRICS["env-efficient"].version
    store = LineageStore(data_root / "lineage.duckdb")
    advantages = read_parquet(store.artifact(EXPERIMENT, 2, "rescore_advantages", version).path)
    out = tmp_path / "rescored.jsonl"
    result = creditline(data_root, "export", "--experiment", EXPERIMENT, "--round", "2", "--rubric", "env-efficient",
                        "--format", "pr941", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["info"]["rubric_version"] for r in records} == {version}
    exported = {
        (s["trajectory_id"], s["extras"]["step_idx"]): s["advantage"]
        for r in records
        for s in r["trajectory"]
    }
    assert exported == {(r.episode_id, r.step_idx): float(r.advantage) for r in advantages.itertuples()}
    unknown = creditline(data_root, "export", "--experiment", EXPERIMENT, "--round", "1", "--rubric", "nope-1234",
                         "--format", "pr941", "--out", str(tmp_path / "x.jsonl"))  # fmt: skip
    assert unknown.returncode == 2 and unknown.stderr.startswith(
        "error: --rubric nope-1234: round 1 was not re-scored"
    )
