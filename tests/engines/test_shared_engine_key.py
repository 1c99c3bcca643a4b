"""Which checkpoints share a process's vLLM engine (`VLLMEngine.shared`, keyed by `_architecture`; no vLLM
needed to compute the key). A policy that another transformers release saved (verifiers' test policy, 5.23.0)
and the checkpoint creditline's trainer saves from it differ in `transformers_version` alone: they share one
engine, whose weights are reloaded, instead of building a second (a minute of CPU; on a GPU, a second share of
its memory). A different dtype or shape still builds its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditline.engines.vllm_engine import _architecture
from creditline.policy.models import load_policy, save_policy

POLICY = Path(__file__).resolve().parents[1] / "data" / "verifiers" / "policy"


def _variant(tmp_path: Path, name: str, **changes) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((POLICY / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}, indent=4))
    return folder


def test_the_trainers_save_of_a_policy_another_transformers_wrote_shares_its_engine(tmp_path):
    model, tokenizer = load_policy(POLICY)
    saved = save_policy(model, tokenizer, tmp_path / "round1")
    before, after = (json.loads((f / "config.json").read_text()) for f in (POLICY, saved))
    if before["transformers_version"] == after["transformers_version"]:
        pytest.skip("this transformers wrote the test policy: the versions do not differ")
    assert _architecture(saved) == _architecture(POLICY)
    moved = _variant(tmp_path, "moved", _name_or_path="/elsewhere/policy")  # written with another layout
    assert _architecture(moved) == _architecture(POLICY)


@pytest.mark.parametrize(
    "changes", [{"dtype": "float16"}, {"hidden_size": 256}, {"tie_word_embeddings": False}]
)
def test_a_checkpoint_of_another_dtype_or_shape_builds_its_own_engine(tmp_path, changes):
    assert _architecture(_variant(tmp_path, "other", **changes)) != _architecture(POLICY)
