"""`EndpointsEngine` against two `creditline serve` processes used as replicas: each row is the local engine's
completion for that row's seed, whatever the number of replicas; `load` switches every replica to another
checkpoint through vLLM's development routes; a replica that is down or refuses is named in one line."""

import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
from e2e.test_serve import _ready_line

from assets import ROUND_ASSETS, round_key
from creditline.config import from_dict
from creditline.engines import SamplingParams, TorchEngine
from creditline.engines.endpoints import EndpointError, EndpointsEngine
from creditline.ids import derive_seed
from creditline.policy.models import SPECIAL_TOKENS, TinyPolicyConfig, build_tiny_policy, load_tokenizer
from creditline.serve import serving
from creditline.serve.serving_http import serving_in_background
from creditline.store import LineageStore
from resources import EngineResource, LineageResource, TrackerResource

pytestmark = pytest.mark.slow
PROMPTS = [
    [1, 16, 17, 4],
    [1, 20, 5, 6, 7, 8, 9],
    [1, 25],
    [1, 12, 13, 14, 15, 29],
    [1, 28, 27],
    [1, 16, 17, 4],
]
"""Six prompts (B = 6); the first and last are the same prompt, so only their rows' seeds differ."""
PARAMS = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=10, seed=11)
EOS = SPECIAL_TOKENS.index("<eos>")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two checkpoints of one architecture with different weights."""
    root = tmp_path_factory.mktemp("endpoints")
    return build_tiny_policy(root / "a", TinyPolicyConfig(seed=0)), build_tiny_policy(
        root / "b", TinyPolicyConfig(seed=1)
    )


@pytest.fixture(scope="module")
def local(folders):
    return {folder: TorchEngine.from_checkpoint(folder) for folder in folders}


@pytest.fixture(scope="module")
def replicas(folders):
    """The base URLs of two `creditline serve --policy A` processes with vLLM's development routes on."""
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    command = [sys.executable, "-m", "pipelines.cli", "serve", "--policy", str(folders[0]), "--port", "0",
               "--model-name", "tiny"]  # fmt: skip
    processes = [
        subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    try:
        yield [_ready_line(process).rsplit(" on ", 1)[1].removesuffix("/v1") for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()


def expected(engine: TorchEngine, prompts, params: SamplingParams):
    """What `EndpointsEngine` promises: row i is the local engine on that prompt alone, seeded for row i."""
    return [
        engine.generate([prompt], replace(params, seed=derive_seed(params.seed, row)))[0]
        for row, prompt in enumerate(prompts)
    ]


def assert_rows_equal(got, want):
    assert len(got) == len(want)
    for row, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g.token_ids, g.finish_reason) == (w.token_ids, w.finish_reason), f"row {row}"
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5), f"row {row}"


def test_rows_are_the_local_engines_whatever_the_replicas(replicas, folders, local):
    two = EndpointsEngine(replicas, "tiny", EOS)
    two.load(folders[0])
    one = EndpointsEngine(replicas[:1], "tiny", EOS)
    assert two.context_length == one.context_length == 64

    on_two, on_one = two.generate(PROMPTS, PARAMS), one.generate(PROMPTS, PARAMS)
    assert on_two == on_one
    assert_rows_equal(on_two, expected(local[folders[0]], PROMPTS, PARAMS))
    assert on_two[0].token_ids != on_two[5].token_ids  # one prompt, two rows: two seeds
    assert two.generate([], PARAMS) == []


def test_load_switches_every_replica_to_the_new_weights(replicas, folders, local):
    engine = EndpointsEngine.for_checkpoint(replicas, folders[0], "hash-a", model_name="tiny")
    before = engine.generate(PROMPTS, PARAMS)
    assert_rows_equal(before, expected(local[folders[0]], PROMPTS, PARAMS))

    assert EndpointsEngine.for_checkpoint(replicas, folders[1], "hash-b", model_name="tiny") is engine
    after = engine.generate(PROMPTS, PARAMS)
    assert_rows_equal(after, expected(local[folders[1]], PROMPTS, PARAMS))
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    assert engine.loaded == (str(folders[1].resolve()), "hash-b")

    # replica 0 is switched back behind this process's back (a restart, another process): the next step's
    # load reloads it anyway, so no row is sampled by the wrong weights
    engine._reload(replicas[0], str(folders[0].resolve()))
    EndpointsEngine.for_checkpoint(replicas, folders[1], "hash-b", model_name="tiny")
    assert_rows_equal(engine.generate(PROMPTS, PARAMS), expected(local[folders[1]], PROMPTS, PARAMS))


def test_stop_strings_and_max_new_tokens_are_the_local_engines(replicas, folders, local):
    engine = EndpointsEngine(replicas, "tiny", EOS)
    engine.load(folders[0])
    free = replace(PARAMS, temperature=1.0, top_p=1.0, max_new_tokens=12, seed=5)
    unstopped = expected(local[folders[0]], PROMPTS, free)
    row = next(
        r for r, c in enumerate(unstopped) if len(c.token_ids) > 3 and c.token_ids[2] >= len(SPECIAL_TOKENS)
    )
    word = load_tokenizer(folders[0]).decode([unstopped[row].token_ids[2]])

    stopped = engine.generate(PROMPTS, replace(free, stop=(word,)))
    assert_rows_equal(stopped, expected(local[folders[0]], PROMPTS, replace(free, stop=(word,))))
    ids = stopped[row].token_ids
    assert (
        stopped[row].finish_reason == "stop" and len(ids) <= 3 and ids == unstopped[row].token_ids[: len(ids)]
    )

    short = engine.generate(PROMPTS, replace(free, max_new_tokens=3))
    assert_rows_equal(short, expected(local[folders[0]], PROMPTS, replace(free, max_new_tokens=3)))
    assert all(len(c.token_ids) <= 3 for c in short) and any(c.finish_reason == "length" for c in short)


def test_a_replica_down_or_refusing_is_named_in_one_line(replicas, folders, tmp_path, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(EndpointError) as down:
        EndpointsEngine([replicas[0], dead], "tiny", EOS)
    assert str(down.value).startswith(f"{dead}/v1/models: unreachable (") and "\n" not in str(down.value)

    with pytest.raises(EndpointError, match=r"'other' is not served there \(it serves \['tiny'\]\)"):
        EndpointsEngine(replicas, "other", EOS)

    wider = build_tiny_policy(tmp_path / "wider", TinyPolicyConfig(hidden_size=32))
    with pytest.raises(EndpointError) as refused:
        EndpointsEngine(replicas, "tiny", EOS).load(wider)
    message = str(refused.value)
    assert message.startswith(
        (f"{replicas[0]}/collective_rpc: HTTP 400: ", f"{replicas[1]}/collective_rpc: HTTP 400: ")
    )
    assert "not a checkpoint of the served architecture" in message and "\n" not in message

    monkeypatch.delenv(
        "VLLM_SERVER_DEV_MODE", raising=False
    )  # creditline serve gates the reload as vLLM does
    engine = TorchEngine.from_checkpoint(folders[0])
    server = serving.PolicyServer(engine, load_tokenizer(folders[0]), "tiny", str(folders[0]))
    with serving_in_background(server) as url, pytest.raises(EndpointError) as gated:
        EndpointsEngine([url], "tiny", EOS).load(folders[1])
    assert gated.value.status == 404 and "start the replica with VLLM_SERVER_DEV_MODE=1" in str(gated.value)


def test_a_round_generates_on_the_replicas_and_moves_them_to_each_new_checkpoint(replicas, tmp_path):
    """Two rounds through Dagster with `[generation] endpoints` (the `EngineResource` the deployment builds): the
    rollouts and evaluations run on the replicas, which end serving round 2's checkpoint (so the assets' engine
    really reloaded them: one left on its start folder would report it); and the same rounds on one replica give
    the same content hashes, rollouts to checkpoints (data parallelism changes nothing recorded)."""
    name = "endpoints-round"
    config = {"name": name, "rollouts": {"tasks_per_round": 2, "group_size": 3}, "train": {"minibatches": 2}}

    def two_rounds(data_root, urls):
        store = rounds_on_replicas(data_root, config, urls, "tiny")
        return {(r, kind): store.artifact(name, r, kind) for r in (1, 2) for kind in ("steps", "checkpoint")}

    both = two_rounds(tmp_path / "two", replicas)
    for url in replicas:
        (card,) = _get(f"{url}/v1/models")["data"]
        assert card["root"] == str(Path(both[(2, "checkpoint")].path).resolve())
    one = two_rounds(tmp_path / "one", replicas[:1])
    assert {k: r.content_hash for k, r in one.items()} == {k: r.content_hash for k, r in both.items()}


def rounds_on_replicas(
    data_root: Path, config: dict, urls: list[str], model_name: str, rounds=(1, 2)
) -> LineageStore:
    """Register `config` on a new data root and run `rounds` through Dagster, generating on the replicas at `urls`
    (the `EngineResource` a deployment with `[generation] endpoints` builds); the root's lineage store."""
    name = config["name"]
    store = LineageStore(data_root / "lineage.duckdb")
    store.register_experiment(name, from_dict(config).to_dict())
    resources = {"lineage": LineageResource(data_root=str(data_root)),
                 "tracker": TrackerResource(data_root=str(data_root)),
                 "engine": EngineResource(generation_endpoints=urls, generation_model=model_name)}  # fmt: skip
    with dg.instance_for_test() as instance:
        for round_ in rounds:
            instance.add_dynamic_partitions("rounds", [round_key(name, round_)])
            result = dg.materialize(ROUND_ASSETS, partition_key=round_key(name, round_), instance=instance,
                                    resources=resources)  # fmt: skip
            assert result.success
    return store


def _get(url: str) -> dict:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())
