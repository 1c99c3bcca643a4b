"""Engines whose engine core runs in the caller's process (`VLLMSettings.in_process`, the default on a CPU
with one tensor-parallel rank), in a process of their own as `creditline serve` and a round's step hold
theirs (`in_process_engine.py`; the commands test_round.py and test_verifiers.py start run theirs so too):
- one samples what the trainer scores as it did, to the tolerance of test_engine.py's engines, and starts no
  process of vLLM's; what its build changed in the process that is not the engine's (vLLM's switch in the
  environment, `torch.set_num_threads`, the global random generator) is as before;
- asked for an engine of another key (the same checkpoint in float16), `VLLMEngine.shared` closes it, and
  frees it (vLLM's engine core is collected), before it starts the new one, which runs (and is what the
  float32 trainer is to half precision); the closed engine refuses to generate; once the last closes, the
  process holds no torch.distributed group.
In this pytest process, where engines run in processes of their own, one in this process is refused before
anything starts; the running engine's IPC sockets are in this process's own folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from creditline.engines.vllm_engine import MULTIPROCESSING_ENV, VLLMEngine
from creditline.policy.models import load_policy
from creditline.train.trainer import pack, score

from .conftest import ROOT, SETTINGS
from .test_engine import LOGPROB_TOLERANCE, SAMPLED

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def in_process_run(tmp_path_factory, untied_checkpoints) -> dict:
    """What `in_process_engine.py` saw, run on the untied checkpoint."""
    out = tmp_path_factory.mktemp("in_process") / "seen.json"
    env = {k: v for k, v in os.environ.items() if k != MULTIPROCESSING_ENV}
    run = subprocess.run([sys.executable, "-m", "tests.vllm_engine.in_process_engine", str(untied_checkpoints[0]),
                          str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


def trainer_gap(folder: Path, rows, sampled, temperature: float, top_p: float = 1.0):
    """|trainer − vLLM| log-prob of each sampled token: the trainer on `folder`, in float32."""
    model, tokenizer = load_policy(folder)
    ids, logprobs = zip(*sampled, strict=True)
    batch = pack(rows, list(ids), list(logprobs), [[0.0] * len(i) for i in ids], tokenizer.pad_token_id)
    trainer = score(model, batch, temperature, top_p=top_p)[batch.completion_mask]
    return (trainer - batch.old_logprobs[batch.completion_mask]).abs()


def test_an_engine_in_process_samples_what_the_trainer_scores_and_starts_no_process(
    in_process_run, untied_checkpoints
):
    assert not any(name.startswith("VLLM") for name in in_process_run["children_first"])
    assert in_process_run["process_state_kept"] == {
        "environment": None,
        "set_num_threads": True,
        "random": True,
    }
    gap = trainer_gap(untied_checkpoints[0], in_process_run["float32_rows"], in_process_run["float32"],
                      SAMPLED.temperature, SAMPLED.top_p)  # fmt: skip
    assert gap.max() < LOGPROB_TOLERANCE, gap.max()


def test_another_key_closes_it_first_and_a_float16_engine_is_the_float32_trainer_to_half_precision(
    in_process_run, untied_checkpoints
):
    """Half precision in vLLM against the float32 trainer (what a GPU's bfloat16 sampler meets, on a CPU that can run
    float16 only): measured over 8 copies of the prompts, medians 1.2e-4 and at most 5.6e-4 at T 1.0."""
    assert (
        in_process_run["first_closed"] and in_process_run["first_freed"] and in_process_run["closed_refuses"]
    )
    assert not in_process_run["distributed_after_close"]
    assert not any(name.startswith("VLLM") for name in in_process_run["children_second"])
    gap = trainer_gap(untied_checkpoints[0], in_process_run["float16_rows"], in_process_run["float16"], 1.0)
    assert gap.median() < 5e-4 and gap.max() < 2e-3, gap
    assert gap.max() > 1e-5  # half precision really ran: float32 agrees to 5e-7


def test_an_engine_in_process_is_refused_beside_a_running_engine(untied_engine, untied_checkpoints):
    given = os.environ.get(MULTIPROCESSING_ENV)
    with pytest.raises(RuntimeError, match=r"1 engine\(s\) already run here .* must be its only one"):
        VLLMEngine(untied_checkpoints[1], replace(SETTINGS, in_process=True))
    assert list(VLLMEngine._running) == [untied_engine] and os.environ.get(MULTIPROCESSING_ENV) == given
    folder = Path(
        os.environ["VLLM_RPC_BASE_PATH"]
    )  # the running engine's sockets: in this process's own folder
    assert folder.name.startswith("clv-ipc-") and any(p.is_socket() for p in folder.iterdir()), folder
