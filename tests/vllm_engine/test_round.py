"""Whole rounds on the vLLM engine through `creditline run`: the real CLI, Dagster instance, DuckDB catalog
and MLflow store, with vLLM generating the rollouts and evaluations in the step's process.

The experiment is the chat example (the built-in Qwen2 chat policy, whose LM head is tied to its
embeddings) made small. Round 2's rollouts reload round 1's checkpoint into the same engine, so the
sampler/trainer mismatch that the trainer measures on its first minibatch (KL(μ‖π_old), `sampler_kl`)
would show a stale output layer; it stays at float32 rounding in both rounds. A policy vLLM's CPU
attention cannot run is refused in one line before anything is registered.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from creditline.store import LineageStore, read_parquet
from creditline.store.rounds import round_commits
from tests.e2e.cli import creditline

from .conftest import DEVICE

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat-maze.toml"
EXPERIMENT = "vllm-chat-maze"


def small_config(tmp_path: Path, **replacements: str) -> Path:
    text = EXAMPLE.read_text()
    for old, new in {'name = "chat-maze"': f'name = "{EXPERIMENT}"', "rounds = 20": "rounds = 2",
                     "tasks_per_round = 64": f'tasks_per_round = 8\ngroup_size = 4\nengine = "vllm"\ndevice = "{DEVICE}"',
                     "group_size = 8\n": "", "num_tasks = 100": "num_tasks = 8", **replacements}.items():  # fmt: skip
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "vllm-chat-maze.toml"
    path.write_text(text)
    return path


def share_torch_compile_cache(temporary: Path) -> None:
    """Torch's compile cache (its precompiled headers at least, which follow the temporary folder whatever
    TORCHINDUCTOR_CACHE_DIR says) as the other tests have it, under `temporary` too: not built again (~5 s)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    shared = Path(default_cache_dir())
    shared.mkdir(parents=True, exist_ok=True)
    (temporary / shared.name).symlink_to(shared, target_is_directory=True)


def test_two_rounds_on_the_vllm_engine_land_with_lineage_and_verify_clean(tmp_path):
    data = tmp_path / "data"
    # a temporary folder of the run's own, with a short path (a socket's may have at most 107 characters)
    with tempfile.TemporaryDirectory() as temporary:
        share_torch_compile_cache(Path(temporary))
        run = creditline(data, "run", "--config", str(small_config(tmp_path)), subprocess=True,
                         env={"TMPDIR": temporary})  # fmt: skip
        # vLLM's IPC sockets went to a folder of the run's process, removed as it ended (before: 7 socket files
        # for each engine, left in the temporary folder)
        left = [p.name for p in Path(temporary).iterdir() if p.is_socket() or p.name.startswith("clv-ipc-")]
    assert run.returncode == 0, run.stderr[-3000:]
    assert not left, left
    store = LineageStore(data / "lineage.duckdb")
    assert sorted(round_commits(store, EXPERIMENT)) == [1, 2]
    for round_ in (1, 2):
        training = read_parquet(store.artifact(EXPERIMENT, round_, "training").path)
        assert 0 <= training["sampler_kl"].iloc[0] < 1e-6, (round_, training["sampler_kl"].iloc[0])
        steps = read_parquet(store.artifact(EXPERIMENT, round_, "steps").path)
        assert len(steps) >= 32 and all(len(ids) == len(lp) for ids, lp in
                                        zip(steps["completion_ids"], steps["completion_logprobs"], strict=True))  # fmt: skip
    parent = store.artifact(EXPERIMENT, 1, "checkpoint").content_hash
    assert (parent, "generated_by") in store.artifact(EXPERIMENT, 2, "steps").parents
    lineage = creditline(data, "lineage", "--experiment", EXPERIMENT, "--json", subprocess=True)
    assert lineage.returncode == 0, lineage.stderr
    kinds = {a["kind"] for a in json.loads(lineage.stdout)["artifacts"]}
    assert {"steps", "scores", "advantages", "checkpoint"} <= kinds
    verify = creditline(data, "verify", "--experiment", EXPERIMENT, subprocess=True)
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout


def test_a_policy_vllm_cannot_run_here_is_refused_before_anything_is_registered(tmp_path):
    data = tmp_path / "data"
    config = small_config(tmp_path, **{'initial_policy = "builtin:chat"': 'initial_policy = "builtin:tiny"'})
    if DEVICE == "cpu":
        config.write_text(config.read_text().replace('device = "cpu"', 'device = "cpu"\ndtype = "bfloat16"'))
    run = creditline(data, "run", "--config", str(config), subprocess=True)
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    if DEVICE == "cpu":
        assert any('initial_policy = "builtin:tiny": has attention head size 16' in line for line in lines), (
            run.stderr
        )
        assert any(
            'rollouts.dtype = "bfloat16": must be "auto", "float32" or "float16" on a CPU' in line
            for line in lines
        )
    assert "Traceback" not in run.stderr
    assert not data.exists()  # nothing registered, nothing written
