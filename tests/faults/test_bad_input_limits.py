"""Inputs a tester found that crashed, hung or silently did something else: each is now one `error:` line,
exit 2, before anything is stored (issue 24, "bad input gets one clear line; configs are code").

    rescore --rounds 1..10**12      built a list of 10**12 rounds (OOM at 23 GB): held to MAX_ROUNDS first
    env.name's module exits/raises  a silent exit, or an "unexpected" line: now names env.name and the module
    serve --port 70000              served on 4464 (the socket takes it modulo 65536): refused
    absurd sizes                    100_000 tasks × 1024, max_steps = 1e8 registered: refused (config_checks limits)
    --out a folder / missing folder an "unexpected" line naming a temp file / folders created: refused
    lineage --round 99              exit 1 without `error:`: a bad argument, naming the rounds that exist
    config is code                  a refused config ran `os:system`; a registered one re-ran its factory on read

Most cases call `main()` in this process, as tests/faults/test_malformed_input.py does; the rescore case
runs the CLI as a subprocess under a memory limit, so that code which builds the range fails fast here
instead of swapping the machine.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from creditline.config import load_config, read_registered, registration
from creditline.config.checks import MAX_ENV_STEPS, MAX_EPISODES_PER_ROUND, MAX_STEP_ROWS
from creditline.store import ArtifactRecord, LineageStore, write_parquet_atomic
from pipelines.cli import main
from tests.faults.in_process import Outcome, cli

ROOT = Path(__file__).resolve().parents[2]
STORED = "stored-exp"
CATALOG = "lineage.duckdb"


def assert_one_error_line(outcome: Outcome, *needles: str) -> None:
    shown = f"exit {outcome.code}\nstderr:\n{outcome.err}\nstdout:\n{outcome.out}"
    assert outcome.code == 2, shown
    assert len(outcome.lines) == 1 and outcome.lines[0].startswith("error: "), shown
    assert "unexpected" not in outcome.err and "Traceback" not in outcome.err, shown
    for needle in needles:
        assert needle in outcome.err, f"{needle!r} not named\n{shown}"


@pytest.fixture
def empty_root(tmp_path, monkeypatch) -> Path:
    """A data root that does not exist yet: a refused command must leave it so (no catalog)."""
    root = tmp_path / "empty-root"
    monkeypatch.setenv("CREDITLINE_DATA_ROOT", str(root))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return root


def steps_table() -> pd.DataFrame:
    rows = [("g0", f"e{e}", s, f"s{s}", float(e), 2.0 * e) for e in range(2) for s in range(2)]
    return pd.DataFrame(
        rows, columns=["group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward"]
    )


@pytest.fixture(scope="module")
def stored_root(tmp_path_factory) -> Path:
    """A data root with one registered experiment whose round 1 has steps and a (recorded) checkpoint."""
    root = tmp_path_factory.mktemp("stored") / "root"
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CREDITLINE_DATA_ROOT", str(root))
        mp.delenv("DAGSTER_HOME", raising=False)
        assert main(["--data-root", str(root), "register", "--experiment", STORED]) == 0
    signal.signal(signal.SIGTERM, previous)
    store = LineageStore(root / CATALOG)
    written = write_parquet_atomic(steps_table(), root / STORED / "r001" / "steps.parquet")
    store.record_artifact(
        ArtifactRecord(STORED, 1, "steps", written.path, written.content_hash, rows=written.rows)
    )
    store.record_artifact(
        ArtifactRecord(STORED, 1, "checkpoint", str(root / STORED / "r001" / "policy"), "0" * 64)
    )
    return root


@pytest.fixture
def root(stored_root, monkeypatch) -> Path:
    monkeypatch.setenv("CREDITLINE_DATA_ROOT", str(stored_root))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return stored_root


def catalog_rows(root: Path) -> dict[str, list]:
    store = LineageStore(root / CATALOG)
    return {"experiments": store.experiments(), "artifacts": sorted(map(repr, store.artifacts(STORED)))}


# --- 1. rescore --rounds far beyond any experiment -----------------------------------------------------


def _memory_limit() -> None:
    limit = 6 * 2**30  # the CLI's imports take ~1.3 GB of address space; a list of 10**12 rounds cannot fit
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_rescore_rounds_beyond_any_experiment_are_refused_without_listing_them(stored_root):
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(stored_root), "OMP_NUM_THREADS": "1"}
    env.pop("DAGSTER_HOME", None)
    argv = ["rescore", "--experiment", STORED, "--rubric", "env", "--rounds", "1..1000000000000"]
    before = catalog_rows(stored_root)
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *argv], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300, preexec_fn=_memory_limit)  # fmt: skip
    outcome = Outcome(done.returncode, done.stdout, done.stderr)
    assert_one_error_line(
        outcome, "--rounds 1..1000000000000", "at most 10000 rounds", "rounds with rollouts: 1"
    )
    assert catalog_rows(stored_root) == before


# --- 2. an environment module that exits or raises on import, or a factory that raises ----------------

MODULES = {
    "exits": ("import sys\nsys.exit(3)\n", "importing {module} called sys.exit(3)"),
    "raises": (
        'raise ValueError("needs CUDA_VISIBLE_DEVICES")\n',
        "importing {module} raised ValueError: needs CUDA_VISIBLE_DEVICES",
    ),  # fmt: skip
    "factory_raises": (
        'def make(**params):\n    raise RuntimeError("no such dataset")\n',
        'env.params = {}: rejected by environment "{module}:make": RuntimeError: no such dataset',
    ),
}


@pytest.mark.parametrize("kind", sorted(MODULES))
def test_an_environment_whose_code_fails_is_one_line_naming_env_name_and_the_module(
    capsys, tmp_path, empty_root, monkeypatch, kind
):
    source, expected = MODULES[kind]
    module = f"creditline_test_env_{kind}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "plugin.toml"
    config.write_text(
        f'name = "plugin-{kind.replace("_", "-")}"\n[env]\nname = "{module}:make"\nparams = {{}}\n'
    )
    outcome = cli("--data-root", str(empty_root), "register", "--config", str(config))
    assert_one_error_line(outcome, str(config), expected.replace("{module}", module))
    if kind != "factory_raises":
        assert f'env.name = "{module}:make": ' in outcome.err
    assert not (empty_root / CATALOG).exists()


# --- 3. serve --port outside 1..65535 --------------------------------------------------------------------


@pytest.mark.parametrize("port", ["70000", "-1", "65536"])
def test_serve_refuses_a_port_outside_the_tcp_range(capsys, tmp_path, empty_root, port):
    outcome = cli("--data-root", str(empty_root), "serve", "--policy", str(tmp_path / "nope"), "--port", port)
    assert_one_error_line(outcome, f"--port {port}: must be 1..65535, or 0 for any free port")
    assert not empty_root.exists()


def test_serve_port_0_means_any_free_port_and_passes_the_check(capsys, tmp_path, empty_root):
    outcome = cli("--data-root", str(empty_root), "serve", "--policy", str(tmp_path / "nope"), "--port", "0")
    assert_one_error_line(outcome, "--policy", "not a checkpoint folder")  # the next check, not the port's


def test_the_http_server_itself_refuses_a_port_a_socket_would_wrap():
    from creditline.serve.serving_http import serve

    with pytest.raises(ValueError, match="port 70000: must be 1..65535"):
        serve(None, "127.0.0.1", 70000)  # type: ignore[arg-type]


# --- 4. sizes this machine cannot hold --------------------------------------------------------------------

SIZE_CASES = [
    ("100_000 tasks × group_size 1024", "[rollouts]\ntasks_per_round = 100000\ngroup_size = 1024\n",
     ["rollouts.tasks_per_round = 100000", "102,400,000 episodes per round", f"{MAX_EPISODES_PER_ROUND:,}"]),
    ("env.params.max_steps = 1e8", "[env.params]\nmax_steps = 1e8\n",
     ["env.params.max_steps = 100000000.0", f"at most {MAX_ENV_STEPS:,}"]),
    ("an evaluation of 1e9 steps", "[eval]\nnum_tasks = 100000\n[env.params]\nmax_steps = 10000\n",
     ["eval.num_tasks = 100000", "1,000,000,000 steps", f"{MAX_STEP_ROWS:,} rows"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "needles"), SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_a_size_beyond_the_limits_is_refused_before_registering(
    capsys, tmp_path, empty_root, case, text, needles
):
    config = tmp_path / "huge.toml"
    config.write_text('name = "huge"\n' + text)
    outcome = cli("--data-root", str(empty_root), "register", "--config", str(config))
    assert_one_error_line(outcome, str(config), *needles)
    assert not (empty_root / CATALOG).exists()


@pytest.mark.parametrize("path", [*sorted((ROOT / "examples").glob("*.toml")), *sorted((ROOT / "tests").glob("*.toml"))],
                         ids=lambda p: p.name)  # fmt: skip
def test_the_shipped_configs_are_within_the_limits(path):
    load_config(path)


# --- 5. --out: a folder, a missing folder, a path that cannot be written ---------------------------------


def _advantages(capsys, root: Path, tmp_path: Path, out: str) -> Outcome:
    steps = write_parquet_atomic(steps_table(), tmp_path / "in" / "steps.parquet").path
    return cli("--data-root", str(root), "advantages", "--estimator", "grpo", "--steps", steps, "--out", out)


def test_advantages_out_a_folder_is_one_line(capsys, tmp_path, empty_root):
    folder = tmp_path / "results"
    folder.mkdir()
    outcome = _advantages(capsys, empty_root, tmp_path, str(folder))
    assert_one_error_line(outcome, f"--out {folder}: is a folder")
    assert list(folder.iterdir()) == []


def test_advantages_out_into_a_missing_folder_is_refused_not_created(capsys, tmp_path, empty_root):
    out = tmp_path / "typo" / "deeper" / "adv.parquet"
    outcome = _advantages(capsys, empty_root, tmp_path, str(out))
    assert_one_error_line(outcome, f"--out {out}: folder {out.parent} does not exist")
    assert not (tmp_path / "typo").exists()


def test_advantages_out_that_cannot_be_written_names_out_not_a_temp_file(capsys, tmp_path, empty_root):
    out = "/proc/creditline-adv.parquet"  # a folder even root cannot create files in
    outcome = _advantages(capsys, empty_root, tmp_path, out)
    assert_one_error_line(outcome, f"--out {out}: ")
    assert ".tmp" not in outcome.err and "/proc/." not in outcome.err


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_export_out_is_checked_like_advantages(capsys, tmp_path, root, where):
    out = tmp_path if where == "folder" else tmp_path / "typo" / "r.jsonl"
    before = catalog_rows(root)
    outcome = cli("--data-root", str(root), "export", "--experiment", STORED, "--format", "pr941",
                  "--out", str(out))  # fmt: skip
    needle = f"--out {out}: is a folder" if where == "folder" else f"folder {out.parent} does not exist"
    assert_one_error_line(outcome, needle)
    assert not (tmp_path / "typo").exists()
    assert catalog_rows(root) == before


# --- 6. lineage --round with no checkpoint --------------------------------------------------------------


def test_lineage_of_a_round_without_a_checkpoint_is_a_bad_argument(capsys, root):
    outcome = cli("--data-root", str(root), "lineage", "--experiment", STORED, "--round", "99")
    assert_one_error_line(outcome, "--round 99", repr(STORED), "rounds with a checkpoint: 1")


def test_lineage_of_an_experiment_without_rounds_says_so_in_one_line(capsys, empty_root):
    config = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
    registered = cli("--data-root", str(empty_root), "register", "--config", str(config),
                     "--experiment", "fresh")  # fmt: skip
    assert registered.code == 0, registered.err
    outcome = cli("--data-root", str(empty_root), "lineage", "--experiment", "fresh")
    assert outcome.code == 1 and len(outcome.lines) == 1, outcome.err  # not "round None"
    assert "'fresh' has no trained checkpoint yet: no round has run" in outcome.err


# --- 7. a config is code: none of it runs before its values are valid, nor when it is read back --------


def test_a_refused_config_runs_none_of_the_code_it_names(capsys, tmp_path, empty_root):
    marker = tmp_path / "marker"
    config = tmp_path / "evil.toml"
    config.write_text(f'rounds = -3\n[env]\nname = "os:system"\nparams = {{ command = "touch {marker}" }}\n')
    outcome = cli("--data-root", str(empty_root), "register", "--config", str(config))
    assert_one_error_line(outcome, str(config), "rounds = -3")
    assert not marker.exists()
    assert not (empty_root / CATALOG).exists()


COUNTING_ENV = """
from creditline.envs.maze import MazeEnv


def make(calls_file, **params):
    with open(calls_file, "a") as calls:
        calls.write("called\\n")
    return MazeEnv(**params)
"""


def test_a_registered_config_is_read_back_without_calling_its_factory(
    capsys, tmp_path, empty_root, monkeypatch
):
    module = "creditline_test_env_counting"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(COUNTING_ENV))
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = tmp_path / "calls"
    config = tmp_path / "counting.toml"
    config.write_text(
        f'name = "counting"\n[env]\nname = "{module}:make"\nparams = {{ calls_file = "{calls}" }}\n'
    )
    outcome = cli("--data-root", str(empty_root), "register", "--config", str(config))
    assert outcome.code == 0, outcome.err
    assert calls.read_text().count("called") == 1  # tried once, when the new config was loaded
    calls.unlink()
    registered = LineageStore(empty_root / CATALOG).experiment_config("counting")
    back = read_registered(registered)
    assert back.env.name == f"{module}:make" and back.to_dict() == registered
    assert registration(back, registered) is registered
    assert not calls.exists()
