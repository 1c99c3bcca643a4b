"""Which checkpoints share a process's vLLM engine (`VLLMEngine.shared`, keyed by the checkpoint's
architecture, the dtype the engine runs in and the settings; no vLLM needed to compute the key).

A policy that another transformers release saved (verifiers' test policy, 5.23.0) and the checkpoint
creditline's trainer saves from it differ in `transformers_version` alone: they share one engine, whose
weights are reloaded, instead of building a second (a minute of CPU here; on a GPU, a second share of its
memory). A different shape builds its own, and so does a dtype the engine would run in differently."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from creditline.engines.vllm_engine import VLLMSettings, _architecture
from creditline.policy.models import load_policy, save_policy

POLICY = Path(__file__).resolve().parents[1] / "data" / "verifiers" / "policy"
CPU, GPU = VLLMSettings(device="cpu"), VLLMSettings(device="cuda")


def _variant(tmp_path: Path, name: str, **changes) -> Path:
    """POLICY's config.json with `changes`, written with another indentation (other bytes)."""
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((POLICY / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}, indent=4))
    return folder


def _key(folder: Path, settings: VLLMSettings) -> tuple:
    return _architecture(folder), settings.resolved_dtype(folder), settings


def test_checkpoints_written_elsewhere_or_by_another_transformers_share_the_engine(tmp_path):
    for changes in ({"transformers_version": "0.0.0"}, {"_name_or_path": "/elsewhere/policy"}):
        assert _key(_variant(tmp_path, str(len(list(tmp_path.iterdir()))), **changes), GPU) == _key(
            POLICY, GPU
        )
    model, tokenizer = load_policy(POLICY)  # and the trainer's own save of it, by this transformers
    assert _key(save_policy(model, tokenizer, tmp_path / "round1"), GPU) == _key(POLICY, GPU)


@pytest.mark.parametrize("changes", [{"hidden_size": 256}, {"tie_word_embeddings": False}])
def test_a_checkpoint_of_another_shape_builds_its_own_engine(tmp_path, changes):
    assert _key(_variant(tmp_path, "other", **changes), CPU) != _key(POLICY, CPU)


def test_a_checkpoint_of_another_dtype_builds_its_own_engine_only_where_it_runs_in_it(tmp_path):
    half = _variant(tmp_path, "half", dtype="float16")
    assert _key(half, GPU) != _key(POLICY, GPU)  # "auto" on a GPU: the checkpoint's own dtype
    assert _key(half, CPU) == _key(POLICY, CPU)  # float32 on a CPU, whatever the checkpoint's
    fixed = replace(GPU, dtype="float16")
    assert _key(half, fixed) == _key(POLICY, fixed)  # the experiment's dtype, whatever the checkpoint's
