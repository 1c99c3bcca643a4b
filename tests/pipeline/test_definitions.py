import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines.definitions import ROUND_JOB, defs

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_hold_the_round_graph_in_order():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "episodes",
        "steps",
        "scores",
        "reward_model",
        "advantages",
        "checkpoint",
        "evaluation",
        "round_summary",
        "rescored_scores",
        "rescored_advantages",
    }
    upstream = {k: {p.to_user_string() for p in graph.get(dg.AssetKey(k)).parent_keys} for k in keys}
    assert upstream["scores"] == {"episodes", "steps"}
    # episodes feed the credit picture (which episodes to draw), not the estimator; the step-reward model
    # (prime, spa) trains on the round's tables and feeds the estimator
    assert upstream["reward_model"] == {"episodes", "steps", "scores"}
    assert upstream["advantages"] == {"episodes", "steps", "scores", "reward_model"}
    assert upstream["checkpoint"] == {"steps", "advantages"}
    assert upstream["evaluation"] == {"checkpoint"}
    assert upstream["round_summary"] == {"evaluation"}
    # the re-score branch reads the round but feeds nothing the round trains on
    assert upstream["rescored_scores"] == {"episodes", "steps"}
    assert "rescored_scores" in upstream["rescored_advantages"]
    assert not any(k.startswith("rescored") for k in upstream["checkpoint"] | upstream["advantages"])
    for key in keys:
        assert graph.get(dg.AssetKey(key)).code_version, key
    assert defs.resolve_job_def(ROUND_JOB) is not None


def test_dagster_definitions_validate_passes():
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # the code is checked, not an instance
    result = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


def test_rescore_partitions_are_rounds_by_dynamic_rubric_versions():
    from assets import RESCORE

    dimensions = {d.name: d.partitions_def for d in RESCORE.partitions_defs}
    assert set(dimensions) == {"round", "rubric"}
    # dynamic, so an old rubric version stays a partition (pipelines/rubric_partitions.py adds the keys)
    assert isinstance(dimensions["rubric"], dg.DynamicPartitionsDefinition)
    assert dimensions["rubric"].name == "rubric_versions"


def test_the_deployment_chooses_the_executor_and_the_instance_storage():
    from creditline.config.deployment import DagsterSettings, Deployment
    from pipelines.definitions import executor_for
    from pipelines.executors import multiprocess_executor
    from pipelines.instance import dagster_yaml

    assert executor_for(Deployment()).name == "in_process"
    multiprocess = executor_for(
        Deployment(dagster=DagsterSettings(executor="multiprocess", max_concurrent=3))
    )
    assert multiprocess.name == "multiprocess"
    # ours: Dagster's, naming its run worker (tests/pipeline/test_reaper.py)
    assert multiprocess.executor_creation_fn is multiprocess_executor.executor_creation_fn
    server = dagster_yaml(DagsterSettings(postgres_url="postgresql://u:pw@db:5432/dagster", gpus=4))
    assert 'postgres_url: "postgresql+psycopg2://u:pw@db:5432/dagster"' in server
    assert "default_limit: 4" in server and "storage:" not in dagster_yaml(DagsterSettings())


def test_the_step_warm_up_needs_no_instance_home(tmp_path):
    """A forkserver started where `$DAGSTER_HOME` is unset or names no folder (a test's removed data root) still
    starts: the warm-up leaves the instance's configured classes to the steps."""
    from pipelines.step_warmup import warm_up

    warm_up(None)
    warm_up(str(tmp_path / "removed"))


STEP_OPENS = """
import dagster as dg
import pandas as pd

from resources.tracker import TrackerResource
from schemas.tables import STOP_REASONS, EpisodesTable
from schemas.validate import validate

dg.DagsterInstance.get().dispose()
TrackerResource(data_root=DATA_ROOT).client().search_experiments(max_results=1)
row = dict(round=1, episode_id="e", group_id="g", task_id=0, sample_idx=0, num_steps=1, success=True,
           env_return=1.0, stop_reason=STOP_REASONS[0])
validate(EpisodesTable, pd.DataFrame([row]), "episodes")
"""
"""What every step process of a round does before its own work: open the run's Dagster instance (from
`$DAGSTER_HOME`) and MLflow's store under `DATA_ROOT`, and check a table."""


@pytest.mark.slow  # a process importing torch, transformers and MLflow: ~8 s
def test_the_multiprocess_forkserver_preloads_what_the_steps_import(tmp_path):
    """Every step process forks from the forkserver: what it has imported, no step imports again, and what
    opening the stores and checking a table import it has imported too (`pipelines.step_warmup`), leaving no
    file or connection open and no thread running for the steps to inherit. The
    definitions alone import no model library, MLflow nor the deployment's store clients."""
    from creditline.config.deployment import DagsterSettings, Deployment, StorageSettings
    from pipelines.definitions import step_preload
    from pipelines.instance import dagster_home

    server = Deployment(
        dagster=DagsterSettings(postgres_url="postgresql://u@db/dagster", executor="multiprocess"),
        storage=StorageSettings(uri="s3://bucket/creditline"),
    )
    modules = step_preload(server)
    assert step_preload(Deployment()) == modules[:4]
    heavy = ["torch", "transformers", "mlflow", "dagster_postgres", "s3fs"]
    # As the forkserver: import the modules, then fork a first step, which creates the stores (the run worker
    # has, before any step), and then another, which reports what opening them imported.
    probe = (
        "import importlib, json, os, sys, threading\n"
        "fds = sorted(os.listdir('/proc/self/fd'))\n"
        f"before = [m for m in {heavy!r} if m in sys.modules]\n"
        "importlib.import_module('pipelines.definitions')\n"
        f"alone = [m for m in {heavy!r} if m in sys.modules]\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps([before, alone, [m for m in {heavy!r} if m in sys.modules]]), flush=True)\n"
        "print(json.dumps([sorted(os.listdir('/proc/self/fd')) == fds, threading.active_count()]), flush=True)\n"
        f"DATA_ROOT = {str(tmp_path)!r}\n"
        "for step in range(2):\n"
        "    if os.fork() == 0:\n"
        "        imported = set(sys.modules)\n"
        f"        exec({STEP_OPENS!r})\n"
        "        print(json.dumps(sorted(set(sys.modules) - imported)), flush=True)\n"
        "        os._exit(0)\n"
        "    assert os.wait()[1] == 0\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home(tmp_path, Deployment()))}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[0] == [[], [], heavy]
    assert lines[1] == [True, 1], "the preload left a file or connection open, or a thread running"
    assert lines[3] == [], f"a step process imports {lines[3]} itself"
