"""What a command's process imports: the CLI starts without the libraries that only some commands use.

torch and transformers take seconds to import, Dagster and MLflow about a second each, vLLM more, and a
command pays for everything its process imports. `creditline --help` once took 5.9 s of CPU because
`creditline.config` reached torch through the step-reward model (issue 26). So importing the CLI and the
config, and running the commands that only read the catalog (`--help`, `report`, `lineage`, and their
one-line errors), import none of them; `run`, `rescore`, `verify` and the rounds' stages import them
where they use them; loading the Dagster definitions imports neither torch nor transformers (the
assets import their stage code when they run). Each case runs a fresh interpreter under `-X importtime`, which names every module
the process imported, lazy imports included.

`tests/test_import_contract.py` checks the other side, from the source: which layers may import what at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from creditline.config import ExperimentConfig
from creditline.store import ArtifactRecord, EvaluationRecord, LineageStore, atomic_directory, hash_directory
from creditline.store.data_root import CATALOG, DATA_ROOT_ENV

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "transformers", "dagster", "mlflow", "vllm"}
"""Imported only by the commands and stages that use them."""
TABLES = {"pandas", "pyarrow", "numpy"}
"""Not imported by the CLI and the config either (a catalog query with parameters imports them: DuckDB's)."""


def imported_roots(*args: str, data_root: Path | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `python -X importtime ARGS` from the repository root: its result (the import lines taken out of
    its stderr) and the top-level names of every module it imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CREDITLINE_DEPLOYMENT", None)
    if data_root is not None:
        env[DATA_ROOT_ENV] = str(data_root)
    result = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = result.stderr.splitlines()
    imports = [line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")]
    assert imports, result.stderr[-2000:]
    result.stderr = "".join(f"{line}\n" for line in lines if not line.startswith("import time:"))
    return result, {name.split(".")[0] for name in imports}


def test_importing_the_cli_and_the_config_imports_no_model_orchestrator_or_table_library():
    result, roots = imported_roots(
        "-c", "import pipelines.cli, creditline.config, creditline.config.stage_settings"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert roots & (HEAVY | TABLES) == set()
    assert {"pipelines", "creditline", "duckdb"} <= roots  # the check sees what was imported


def test_loading_the_dagster_definitions_imports_no_model_library_nor_mlflow():
    """The webserver, the daemon and the code server (every sensor tick) load the definitions; each run's
    process loads them before its first step. The stages import torch and transformers when they run."""
    result, roots = imported_roots("-c", "import pipelines.definitions")
    assert result.returncode == 0, result.stderr[-2000:]
    assert roots & (HEAVY - {"dagster"}) == set()
    assert {"dagster", "assets", "pandera"} <= roots  # the check sees what was imported


def test_a_torchrun_rank_imports_neither_dagster_nor_mlflow_nor_the_other_assets():
    """`assets.train_worker` is one rank of the training stage under torchrun: it talks to Dagster through
    `dagster_pipes` alone, so it imports no other module of the `assets` package either (each imports Dagster)."""
    result, roots = imported_roots("-c", "import assets.train_worker")
    assert result.returncode == 0, result.stderr[-2000:]
    assert roots & {"dagster", "mlflow", "vllm", "pandera"} == set()
    assert {"torch", "dagster_pipes", "assets"} <= roots  # the check sees what was imported


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """A registered experiment: its initial policy, a round-1 checkpoint trained from it, their evaluations."""
    root = tmp_path_factory.mktemp("data")
    store = LineageStore(root / CATALOG)
    config = ExperimentConfig()
    store.register_experiment(config.name, config.to_dict())
    policies = []
    for round_ in (0, 1):
        with atomic_directory(root / config.name / f"r{round_:03d}" / "policy") as folder:
            (folder / "config.json").write_text(f'{{"round": {round_}}}')
        policies.append(root / config.name / f"r{round_:03d}" / "policy")
    initial = store.record_initial_policy(config.name, str(policies[0]), hash_directory(policies[0]))
    trained = store.record_artifact(
        ArtifactRecord(config.name, 1, "checkpoint", str(policies[1]), hash_directory(policies[1])),
        [(initial.content_hash, "initialized_from")],
    )
    for record, success in ((initial, 0.25), (trained, 0.5)):
        store.record_evaluation(EvaluationRecord(config.name, record.round, record.content_hash, success,
                                                 -1.0, 12.0, 0.5, 8))  # fmt: skip
    return root


@pytest.mark.parametrize(
    ("command", "exit_code", "printed"),
    [
        (["--help"], 0, "report"),
        (["report"], 0, "0.50"),
        (["report", "--json"], 0, '"success_rate": 0.25'),
        (["lineage"], 0, "all files match"),
        (["report", "--experiment", "nosuch"], 2, "error: --experiment 'nosuch' is not registered"),
        (["lineage", "--round", "3"], 2, "error: --round 3: experiment 'maze-gigpo' has no checkpoint"),
    ],
    ids=["help", "report", "report-json", "lineage", "report-error", "lineage-error"],
)
def test_read_only_commands_import_no_model_orchestrator_or_tracker(data_root, command, exit_code, printed):
    result, roots = imported_roots("-m", "pipelines.cli", *command, data_root=data_root)
    assert result.returncode == exit_code, result.stderr[-2000:]
    assert printed in result.stdout + result.stderr
    assert roots & HEAVY == set()


def test_the_cli_opens_the_store_that_the_lineage_resource_opens(tmp_path, monkeypatch):
    """Without Dagster, and the same store object, under a deployment whose artifacts go to object storage."""
    from pipelines.cli import _store
    from resources import deployed_resources

    deployment = tmp_path / "deployment.toml"
    deployment.write_text(
        '[lineage]\ncatalog = "postgresql://creditline@127.0.0.1:1/lineage"\n'
        f'[storage]\nuri = "file://{tmp_path}/objects"\n'
    )
    monkeypatch.setenv("CREDITLINE_DEPLOYMENT", str(deployment))
    store = _store(str(tmp_path / "data"))
    assert store is deployed_resources(str(tmp_path / "data"))["lineage"].store()
    assert store.objects is not None and store.objects.uri == f"file://{tmp_path}/objects"


@pytest.mark.slow  # imports torch and transformers (~8 s): `make test`, not `make test-fast`
def test_the_policies_and_the_reward_model_load_transformers_without_scikit_learn():
    """`creditline.policy.hf`: transformers' models without `sklearn.metrics` (805 modules, 1.15–1.5 s), and
    assisted generation's `roc_curve` still scikit-learn's, imported on its first call."""
    check = (
        "import sys, creditline.policy.models, creditline.policy.chat_policy, creditline.credit.reward_model; "
        "assert 'sklearn' not in sys.modules, 'imported'; "
        "import transformers.generation.candidate_generator as g; from sklearn.metrics import roc_curve; "
        "got, want = g.roc_curve([0, 1, 1, 0], [0.1, 0.9, 0.8, 0.3]), roc_curve([0, 1, 1, 0], [0.1, 0.9, 0.8, 0.3]); "
        "assert all((a == b).all() for a, b in zip(got, want, strict=True)), (got, want)"
    )
    result, roots = imported_roots("-c", check)
    assert result.returncode == 0, result.stderr[-2000:]
    assert {"torch", "transformers", "sklearn"} <= roots  # sklearn: by the last line's own import
