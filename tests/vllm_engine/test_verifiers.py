"""verifiers against the vLLM engine: `creditline serve --engine vllm` answers verifiers 0.4.0's own training
client, and a round whose rollouts a verifiers environment plays serves its parent on vLLM.

The policy is the one that made the verifiers test data (tests/data/verifiers/policy: Qwen2, tied LM head,
head size 32), which calls the `add` tool. verifiers runs in its own venv (.venv-verifiers-0.4, made by `make
install-test`). The client renders the chat with the policy's tokenizer and calls `/inference/v1/generate`, so
every model call it records carries token ids and log-probs: the trainer's log-probs of those tokens equal
what the served vLLM engine reported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from e2e.test_serve import _ready_line
from e2e.test_verifiers_rollout_source import POLICY, ROOT, VENVS, config_file

from creditline.interop.verifiers_import import read_source, source_tables
from creditline.policy.models import load_policy
from creditline.store import LineageStore, read_parquet
from creditline.train.trainer import pack, score
from tests.e2e.cli import creditline
from tests.servers import stop_process

from .conftest import DEVICE

pytestmark = pytest.mark.slow
MODEL = "creditline-verifiers-policy"


@pytest.fixture(scope="module")
def served_on_vllm():
    """`creditline serve --engine vllm` on the verifiers policy: its base URL (…/v1)."""
    command = [sys.executable, "-m", "pipelines.cli", "serve", "--engine", "vllm", "--policy", str(POLICY),
               "--port", "0", "--seed", "0", "--model-name", MODEL]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        line = _ready_line(process)
        assert line.startswith("serving ") and f" as {MODEL} on http://127.0.0.1:" in line, line
        yield line.rsplit(" on ", 1)[1]
    finally:
        stop_process(process, timeout_s=60)


def test_verifiers_own_client_plays_against_creditline_serve_on_vllm(served_on_vllm, tmp_path):
    out = tmp_path / "tool_calls"
    run = subprocess.run([str(VENVS["v1"] / "bin" / "python"), str(ROOT / "scripts/verifiers/v04/run_case.py"),
                          "tool_calls", "--base-url", served_on_vllm, "--model", MODEL, "--policy", str(POLICY),
                          "--out", str(out)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    tables = source_tables(read_source(out), "served", 1)
    assert len(tables.episodes) == 15 and tables.episodes.groupby("group_id").size().tolist() == [3] * 5
    steps = tables.steps
    assert steps["action"].str.contains("add(", regex=False).any()  # the policy called the tool through vLLM
    model, tokenizer = load_policy(POLICY)
    batch = pack(steps["prompt_ids"].map(list).tolist(), steps["completion_ids"].map(list).tolist(),
                 steps["completion_logprobs"].map(list).tolist(),
                 [[0.0] * len(ids) for ids in steps["completion_ids"]], tokenizer.pad_token_id)  # fmt: skip
    trainer = score(model, batch, temperature=1.0)[batch.completion_mask]
    served = batch.old_logprobs[batch.completion_mask]
    assert served.numel() > 100 and float((trainer - served).abs().max()) < 1e-4


def test_a_round_that_verifiers_plays_serves_its_parent_on_vllm(tmp_path):
    config = config_file(tmp_path, "v1")
    text = config.read_text()
    assert "[rollouts]\n" in text
    config.write_text(text.replace("[rollouts]\n", f'[rollouts]\nengine = "vllm"\ndevice = "{DEVICE}"\n'))
    data = tmp_path / "data"
    run = creditline(data, "run", "--experiment", "vf-vllm", "--config", str(config), subprocess=True)
    assert run.returncode == 0, run.stderr[-3000:]
    # verifiers' rollouts and creditline's evaluation (of the initial policy and of round 1's checkpoint) are
    # served by one engine, the deployment's, reloaded: vLLM logs each engine it builds once
    assert run.stderr.count("Initializing a V1 LLM engine") == 1, run.stderr[-3000:]
    store = LineageStore(data / "lineage.duckdb")
    assert store.artifact("vf-vllm", 1, "source").meta["format"] == "v1"
    steps = read_parquet(store.artifact("vf-vllm", 1, "steps").path)
    assert steps["action"].str.contains("add(", regex=False).any()
    training = read_parquet(store.artifact("vf-vllm", 1, "training").path)
    assert (
        training["sampler_kl"].iloc[0] < 1e-6
    )  # vLLM's log-probs, as verifiers recorded them, are the trainer's
    verify = creditline(data, "verify", "--experiment", "vf-vllm", subprocess=True)
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout
