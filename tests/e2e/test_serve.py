"""`creditline serve` as a real process: a round's checkpoint from the lineage store behind HTTP, answered
with vLLM's shapes, stopped cleanly by SIGTERM."""

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy
from creditline.store import LineageStore, hash_path
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
SMALL = ChatPolicyConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                         max_positions=256, vocab_size=300)  # fmt: skip
STARTUP_SECONDS = 120


def _ready_line(process: subprocess.Popen) -> str:
    """The server's first stdout line (it prints it once listening), or fail with its stderr."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if select.select([process.stdout], [], [], 1.0)[0]:
            return process.stdout.readline().strip()
        if process.poll() is not None:
            break
    process.kill()
    pytest.fail(f"creditline serve did not start: {process.stderr.read()[-3000:]}")


def _call(url: str, body: dict | None = None) -> tuple[int, dict | bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, (json.loads(raw) if raw else raw)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data_root = tmp_path_factory.mktemp("data")
    folder = build_chat_policy(
        data_root / "policy", ["hello there, what is 2 + 3?", "the answer is 5"] * 4, SMALL
    )
    store = LineageStore(data_root / "lineage.duckdb")
    store.register_experiment("served", {"name": "served"})
    store.record_initial_policy("served", str(folder), hash_path(folder))
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(data_root)}
    command = [sys.executable, "-m", "pipelines.cli", "serve", "--experiment", "served", "--round", "0",
               "--port", "0", "--model-name", "tiny", "--seed", "7"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    line = _ready_line(process)
    try:
        yield process, line, line.rsplit(" on ", 1)[1]
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def test_serve_answers_vllms_routes_then_stops_on_sigterm(served):
    process, line, base = served
    root = base.removesuffix("/v1")
    assert line.startswith("serving ") and " as tiny on http://127.0.0.1:" in line and base.endswith("/v1")
    assert _call(f"{root}/health")[0] == 200
    status, cards = _call(f"{base}/models")
    assert status == 200 and cards["data"][0]["id"] == "tiny" and cards["data"][0]["max_model_len"] == 256

    chat = {"model": "tiny", "messages": [{"role": "user", "content": "what is 2 + 3?"}], "max_tokens": 6,
            "seed": 3, "logprobs": True, "extra_field": 1, "return_token_ids": True}  # fmt: skip
    status, answer = _call(f"{base}/chat/completions", chat)
    assert status == 200, answer
    choice = answer["choices"][0]
    assert (
        len(choice["logprobs"]["content"]) == len(choice["token_ids"]) == answer["usage"]["completion_tokens"]
    )
    assert _call(f"{base}/chat/completions", chat)[1]["choices"][0]["token_ids"] == choice["token_ids"]
    tokens = {**chat, "tokens": answer["prompt_token_ids"]}
    assert (
        _call(f"{base}/chat/completions/tokens", tokens)[1]["choices"][0]["token_ids"] == choice["token_ids"]
    )

    generate = {"model": "tiny", "token_ids": answer["prompt_token_ids"],
                "sampling_params": {"max_tokens": 6, "seed": 3, "logprobs": 1, "skip_special_tokens": False}}  # fmt: skip
    status, generated = _call(f"{root}/inference/v1/generate", generate)
    assert status == 200 and generated["choices"][0]["token_ids"] == choice["token_ids"]
    assert [e["logprob"] for e in generated["choices"][0]["logprobs"]["content"]] == [
        e["logprob"] for e in choice["logprobs"]["content"]
    ]
    status, text = _call(f"{base}/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 3})
    assert status == 200 and text["object"] == "text_completion"

    status, error = _call(f"{base}/chat/completions", {**chat, "max_tokens": 1000})
    assert status == 400 and "maximum context length is 256" in error["error"]["message"]
    assert _call(f"{base}/chat/completions", {**chat, "model": "other"})[0] == 404

    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def test_serve_needs_exactly_one_source(tmp_path):
    result = creditline(tmp_path, "serve", timeout=120)
    assert result.returncode == 2 and "give --policy FOLDER, or --experiment NAME" in result.stderr
