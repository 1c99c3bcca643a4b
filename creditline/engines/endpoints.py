"""`EndpointsEngine`: generation on running OpenAI-compatible servers used as data-parallel replicas.

`vllm serve` processes (or `creditline serve` ones, which answer the same routes) each hold a copy of the
policy; this engine spreads a batch's prompts over them and, between rounds, points every replica at the new
checkpoint folder. It honours the engine protocol (`creditline.engines.base`): token ids in, completion ids
and the sampled tokens' log-probs out. For those to be the trainer's numbers, start `vllm serve` with
`--logprobs-mode processed_logprobs` (what `VLLMEngine` asks of its in-process engine).

Seeding: row `i` of a call seeded `s` is its own request, seeded `derive_seed(s, i)` (`VLLMEngine`'s rule;
vLLM seeds each request's own generator), so which replica answers a row, and how many there are, does not
choose its random draws. Its numbers are another matter: `creditline serve` answers one request at a time, so
a row's completion is the same on any replica set (what the tests check); `vllm serve` batches concurrent
requests, and its kernels' float sums may depend on the batch, so the same row can differ in its last bits,
and now and then in a token, between runs (unless vLLM runs batch-invariant).

One experiment at a time per replica set: a step reloads every replica at its start, so two experiments (or
two rounds' steps at once) sharing replicas would switch each other's weights mid-generation, which nothing
here detects. Give each concurrently running experiment its own replicas.

Replica contract, vLLM 0.32's routes (`url` is a base URL such as http://10.0.0.5:8000; a trailing /v1 is
dropped):

    GET  url/v1/models          the served model's card; its `max_model_len` (the smallest over replicas) is
                                this engine's `context_length`
    POST url/v1/completions     one request per prompt: `prompt` as token ids, `seed`, `logprobs: 0`,
                                `return_token_ids: true`, `include_stop_str_in_output: true`, `stop`;
                                read back: `choices[0].token_ids`, `.logprobs.token_logprobs`,
                                `.finish_reason`
    POST url/collective_rpc     `load`: {"method": "reload_weights", "kwargs": {"weights_path": FOLDER}}, the
                                worker method `LLM.collective_rpc("reload_weights", ...)` calls in process
    POST url/reset_prefix_cache `load`, after the reload: cached KV blocks were computed by the old weights

The last two are vLLM development routes: the replicas run with `VLLM_SERVER_DEV_MODE=1`. Tokens in and out go
through `/v1/completions` rather than `/inference/v1/generate`: vLLM 0.32 answers the latter only with
`--enable-scale-out` (403 otherwise) and changed its log-prob entries between versions, while
`return_token_ids` on completions is there in every vLLM since 0.10.2.

Shapes: `generate(prompts, params)` takes B prompts (lists of token ids) and returns B completions in prompt
order; row `i` goes to replica `i % E` of the E replicas, at most `max_in_flight` requests in flight per
replica. Errors are an `EndpointError`: one line naming the replica URL and what failed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import ClassVar, TypeVar

from creditline.engines.base import Completion, SamplingParams
from creditline.ids import derive_seed

T = TypeVar("T")

RESET_ATTEMPTS = 10
"""`/reset_prefix_cache` answers success false while blocks are still held: tries before giving up."""

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Replicas are reached directly, never through an HTTP proxy named in the environment."""


class EndpointError(RuntimeError):
    """A replica was unreachable, did not answer in time, or refused a request (`status`: its HTTP status)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class EndpointsEngine:
    _shared: ClassVar[dict[tuple, EndpointsEngine]] = {}

    def __init__(
        self,
        urls: Sequence[str],
        model_name: str,
        eos_token_id: int,
        timeout_s: float = 600.0,
        max_in_flight: int = 16,
    ):
        """Generate with `model_name` as served at `urls`; asks each replica for its model card first."""
        if not urls:
            raise ValueError("EndpointsEngine needs at least one replica URL")
        self.urls = tuple(url.rstrip("/").removesuffix("/v1") for url in urls)
        self.model_name, self.eos_token_id = model_name, eos_token_id
        self.timeout_s, self.max_in_flight = timeout_s, max_in_flight
        self.loaded: tuple[str, str | None] | None = None
        """(folder, content hash) that `load` last made every replica serve."""
        lengths = self._on_replicas([(r, self._max_model_len, (url,)) for r, url in enumerate(self.urls)])
        known = [n for n in lengths if n is not None]
        self.context_length: int | None = min(known) if known else None
        """The longest prompt + completion every replica serves (the smallest `max_model_len`)."""

    @classmethod
    def for_checkpoint(
        cls,
        urls: Sequence[str],
        folder: str | Path,
        content_hash: str | None = None,
        *,
        model_name: str,
        timeout_s: float = 600.0,
        max_in_flight: int = 16,
    ) -> EndpointsEngine:
        """This process's engine on `urls` (kept between rounds, as `VLLMEngine.shared`), serving `folder`'s
        weights (recorded as `content_hash`, when given: see `load`)."""
        key = (tuple(urls), model_name, timeout_s, max_in_flight)
        engine = cls._shared.get(key)
        if engine is None:
            engine = cls._shared[key] = cls(urls, model_name, _eos_token_id(folder), timeout_s, max_in_flight)
        engine.load(folder, content_hash)
        return engine

    def load(self, folder: str | Path, content_hash: str | None = None, force: bool = True) -> None:
        """Make every replica serve the weights of `folder`, a checkpoint of the architecture they serve
        (`force` is `VLLMEngine.load`'s, for `creditline serve`'s reload route: here every call reloads).

        The replicas read the folder themselves: it must be on a filesystem they share with this process, at
        the same absolute path. Every call reloads, even a folder this process loaded last: a replica may have
        been restarted, or reloaded by another process, since (a step costs one reload; nothing here can ask a
        replica which weights it holds). `content_hash` is kept in `loaded` for the record."""
        path = str(Path(folder).resolve())
        self.eos_token_id = _eos_token_id(path)
        self.loaded = None  # until every replica has reloaded
        self._on_replicas([(r, self._reload, (url, path)) for r, url in enumerate(self.urls)])
        self.loaded = (path, content_hash)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        bodies = [
            completion_request(self.model_name, prompt, params, derive_seed(params.seed, row))
            for row, prompt in enumerate(prompts)
        ]
        replicas = len(self.urls)
        return self._on_replicas(
            [
                (row % replicas, self._complete, (self.urls[row % replicas], body))
                for row, body in enumerate(bodies)
            ]
        )

    def _on_replicas(self, jobs: list[tuple[int, Callable[..., T], tuple]]) -> list[T]:
        """Run `fn(*args)` for each `(replica, fn, args)`, at most `max_in_flight` at once per replica; the
        results in job order, or the first failing job's error (the jobs not started are cancelled)."""
        pools = [ThreadPoolExecutor(self.max_in_flight) for _ in self.urls]
        try:
            futures = [pools[replica].submit(fn, *args) for replica, fn, args in jobs]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [error for f in futures if f in done and (error := f.exception()) is not None]
            if failed:
                raise failed[0]
            return [f.result() for f in futures]
        finally:
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)

    def _max_model_len(self, url: str) -> int | None:
        cards = _call(f"{url}/v1/models", None, self.timeout_s).get("data")
        served = [c for c in cards if isinstance(c, dict)] if isinstance(cards, list) else []
        card = next((c for c in served if c.get("id") == self.model_name), None)
        if card is None:
            names = [c.get("id") for c in served]
            raise EndpointError(
                f"{url}/v1/models: {self.model_name!r} is not served there (it serves {names})"
            )
        return card.get("max_model_len")

    def _complete(self, url: str, body: dict) -> Completion:
        where = f"{url}/v1/completions"
        answer = _call(where, body, self.timeout_s)
        try:
            choice = answer["choices"][0]
            ids, logprobs = list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])
            finish = choice["finish_reason"]
        except (KeyError, IndexError, TypeError):
            raise EndpointError(
                f"{where}: the answer lacks choices[0].token_ids and .logprobs.token_logprobs "
                "(vLLM returns them since 0.10.2)"
            ) from None
        if finish not in ("stop", "length"):
            raise EndpointError(f"{where}: the completion ended with finish_reason={finish!r}")
        if len(logprobs) != len(ids) or any(lp is None for lp in logprobs):
            raise EndpointError(f"{where}: {len(ids)} token ids but {len(logprobs)} log-probs")
        return Completion(
            token_ids=[int(t) for t in ids], logprobs=[float(lp) for lp in logprobs], finish_reason=finish
        )

    def _reload(self, url: str, folder: str) -> None:
        try:
            _call(
                f"{url}/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": folder}},
                self.timeout_s,
            )
        except EndpointError as error:
            if error.status != 404:
                raise
            raise EndpointError(
                f"{error} (weights are reloaded through vLLM's development routes: start the "
                "replica with VLLM_SERVER_DEV_MODE=1)",
                404,
            ) from None
        for _ in range(RESET_ATTEMPTS):
            if _call(f"{url}/reset_prefix_cache", {}, self.timeout_s).get("success", True):
                return
            time.sleep(0.5)
        raise EndpointError(
            f"{url}/reset_prefix_cache: still refused after {RESET_ATTEMPTS} tries "
            "(is another client generating on this replica?)"
        )


def completion_request(model_name: str, prompt: Sequence[int], params: SamplingParams, seed: int) -> dict:
    """The `/v1/completions` body sampling one completion of `prompt` (token ids) as `params` say, seeded
    `seed`."""
    body = {
        "model": model_name,
        "prompt": [int(t) for t in prompt],
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "seed": seed,
        "logprobs": 0,  # the sampled token's own log-prob
        "return_token_ids": True,
        "include_stop_str_in_output": True,  # as the other engines: the text ends with the stop string
    }
    if params.stop:
        body["stop"] = list(params.stop)
    return body


def _call(url: str, body: dict | None, timeout_s: float) -> dict:
    """GET `url` (no `body`) or POST `body` as JSON; the JSON answer ({} when empty), else an
    `EndpointError`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        raise EndpointError(f"{url}: HTTP {error.code}: {_server_message(error)}", error.code) from None
    except urllib.error.URLError as error:
        raise EndpointError(f"{url}: unreachable ({error.reason})") from None
    except TimeoutError:
        raise EndpointError(f"{url}: no answer within {timeout_s:g} s") from None
    except OSError as error:  # the connection dropped mid-answer
        raise EndpointError(f"{url}: the connection failed ({error})") from None
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise EndpointError(
            f"{url}: the answer is not JSON: {_one_line(raw.decode(errors='replace'))}"
        ) from None


def _server_message(error: urllib.error.HTTPError) -> str:
    """The message of an error answer: vLLM's `{"error": {"message"}}`, FastAPI's `{"detail"}`, or its
    text."""
    try:
        raw = error.read().decode(errors="replace")
    except OSError:
        raw = ""
    try:
        answer = json.loads(raw)
    except ValueError:
        return _one_line(raw or str(error.reason))
    inner = answer.get("error") if isinstance(answer, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else inner
    if message is None and isinstance(answer, dict):
        message = answer.get("detail")
    return _one_line(str(message if message is not None else raw))


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _eos_token_id(folder: str | Path) -> int:
    """The EOS of `folder`'s tokenizer (the id that ends a completion, as `TorchEngine` and vLLM read it)."""
    from creditline.policy.models import load_tokenizer

    return load_tokenizer(folder).eos_token_id
