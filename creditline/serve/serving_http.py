"""The HTTP shell around `creditline.serve.serving`: vLLM's routes on a Starlette app, run by uvicorn.

Routes (vLLM's paths; the OpenAI ones under `/v1`, vLLM's own at the root):

    GET  /health                       200 once the engine is loaded
    GET  /v1/models                    one model card, with `max_model_len`
    POST /v1/chat/completions          chat, rendered with the checkpoint's chat template
    POST /v1/chat/completions/tokens   the same with the prompt given as ids (`tokens`; prime-rl's route,
                                       used by verifiers 0.3.1's token client after the first turn)
    POST /v1/completions               text or token-id prompts
    POST /inference/v1/generate        tokens in, tokens out (verifiers 0.4.0's training client)
    POST /tokenize                     messages or a prompt to ids

With `VLLM_SERVER_DEV_MODE=1` in the environment (vLLM's gate for its development routes: an integer, non-zero
enables them), the two routes a client needs to switch a running replica to another checkpoint of the same
architecture, as vLLM 0.32 answers them (vllm/entrypoints/serve/dev/rpc/api_router.py,
dev/cache/api_router.py):

    POST /collective_rpc               {"method": "reload_weights", "kwargs": {"weights_path": FOLDER}} ->
                                       {"results": [null]}; the engine is rebuilt from FOLDER (a torch engine)
                                       or reloads its weights in place (a vLLM engine), under the engine lock
    POST /reset_prefix_cache           {"success": true} (these engines keep no KV cache between requests)

Only `reload_weights` is implemented (vLLM's workers answer any method; this server has none to call), with
`weights_path` (default: the folder served now) and `is_checkpoint_format` true; a FOLDER whose config.json
differs from the served one's (beyond `transformers_version`, `_name_or_path`, `dtype`) is refused with a 400.

Engines are not thread-safe and a `TorchEngine` samples a batch's rows from one generator, so requests
are answered one at a time (a lock around each engine call, run off the event loop); throughput at scale
comes from serving with `--engine vllm` or from `vllm serve` itself. Requests without a `seed` take
`serving.fallback_seed(server seed, n)` for the n-th such request, so a server restarted with the same
`--seed` answers the same request sequence with the same completions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from creditline.engines.base import Engine
from creditline.engines.vllm_engine import checkpoint_architecture
from creditline.serve import serving
from creditline.serve.serving_requests import RequestError, prompt_token_ids


class _RequestCounter:
    """Numbers the requests that name no seed, under the engine lock."""

    def __init__(self, server_seed: int):
        self.server_seed, self.count = server_seed, 0

    def next_seed(self) -> int:
        seed = serving.fallback_seed(self.server_seed, self.count)
        self.count += 1
        return seed


DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
"""The environment variable that enables vLLM's development routes (here: the weight reload ones)."""


def dev_mode() -> bool:
    """Whether `VLLM_SERVER_DEV_MODE` enables the development routes, read as vLLM reads it
    (`bool(int(...))`)."""
    value = os.environ.get(DEV_MODE_ENV, "0")
    try:
        return bool(int(value))
    except ValueError:
        raise ValueError(f"{DEV_MODE_ENV} must be an integer (0 or 1), got {value!r}") from None


class _Served:
    """The policy being served now: `/collective_rpc` `reload_weights` replaces it, under the engine lock."""

    def __init__(self, server: serving.PolicyServer):
        self.server = server


def build_app(server: serving.PolicyServer, seed: int = 0, dev_routes: bool | None = None) -> Starlette:
    """The ASGI app answering vLLM's routes with `server`'s engine; `seed` is the server's `--seed`.
    `dev_routes` adds the weight reload routes (None: when `VLLM_SERVER_DEV_MODE` says so, as vLLM does)."""
    engine_lock, counter, served = threading.Lock(), _RequestCounter(seed), _Served(server)

    def seeded(answer):
        def call(body: dict) -> dict:
            with engine_lock:
                return answer(served.server, body, counter.next_seed())

        return call

    def chat_tokens(server_, body: dict, fallback: int) -> dict:
        tokens = body.get("tokens") if isinstance(body, dict) else None
        ids = prompt_token_ids(server_.tokenizer, tokens, field="tokens", batch=False)[0]
        return serving.chat_completion(server_, body, fallback, prompt_ids=ids)

    def collective_rpc(body: dict) -> dict:
        folder = reload_weights_path(body, served.server.folder)
        with engine_lock:
            served.server = reload_policy(served.server, folder)
        return {"results": [None]}  # one worker, whose reload_weights returns None

    def post(answer):
        async def endpoint(request: Request) -> Response:
            try:
                body = json.loads(await request.body())
            except ValueError as exc:
                return _error(RequestError(f"the request body is not valid JSON: {exc}"))
            try:
                return JSONResponse(await run_in_threadpool(answer, body))
            except RequestError as exc:
                return _error(exc)
            except Exception as exc:  # a bug or an engine failure: the server stays up
                message = f"{type(exc).__name__}: {exc}"
                return JSONResponse(
                    {
                        "error": {
                            "message": message,
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    },
                    status_code=500,
                )

        return endpoint

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse(serving.models(served.server))

    async def reset_prefix_cache(request: Request) -> Response:
        return JSONResponse({"success": True})  # the engines keep no KV cache between requests

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", post(seeded(serving.chat_completion)), methods=["POST"]),
        Route("/v1/chat/completions/tokens", post(seeded(chat_tokens)), methods=["POST"]),
        Route("/v1/completions", post(seeded(serving.completion)), methods=["POST"]),
        Route("/inference/v1/generate", post(seeded(serving.generate_tokens)), methods=["POST"]),
        Route("/tokenize", post(lambda body: serving.tokenize(served.server, body)), methods=["POST"]),
    ]
    if dev_mode() if dev_routes is None else dev_routes:
        routes += [
            Route("/collective_rpc", post(collective_rpc), methods=["POST"]),
            Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
        ]
    return Starlette(routes=routes)


def reload_weights_path(body, served_folder: str) -> str:
    """The folder a `/collective_rpc` body asks to reload from: vLLM's `{"method", "args", "kwargs"}`, with
    `method` "reload_weights" and `kwargs.weights_path` (default: the folder served now)."""
    if not isinstance(body, dict):
        raise RequestError("Request body must be a JSON object")
    method, args, kwargs = body.get("method"), body.get("args") or [], body.get("kwargs") or {}
    if method is None:
        raise RequestError("Missing 'method' in request body", "method")
    if method != "reload_weights":
        raise RequestError(
            f"collective_rpc: this server implements only 'reload_weights', not {method!r}", "method"
        )
    if args or not isinstance(kwargs, dict):
        raise RequestError("reload_weights takes keyword arguments only: {'weights_path': FOLDER}", "args")
    unknown = sorted(set(kwargs) - {"weights_path", "is_checkpoint_format"})
    if unknown:
        raise RequestError(f"reload_weights: unknown arguments {unknown}", "kwargs")
    if kwargs.get("is_checkpoint_format", True) is not True:
        raise RequestError(
            "reload_weights: only checkpoint-format weights (a checkpoint folder) can be loaded",
            "kwargs.is_checkpoint_format",
        )
    folder = kwargs.get("weights_path") or served_folder
    if not isinstance(folder, str) or not folder:
        raise RequestError("reload_weights: weights_path must be a checkpoint folder", "kwargs.weights_path")
    return folder


def reload_policy(server: serving.PolicyServer, folder: str | Path) -> serving.PolicyServer:
    """`server` serving the weights of `folder`, a checkpoint of the same architecture (vLLM's
    `reload_weights`): a torch engine is rebuilt from the folder on its device, a vLLM engine reloads its
    weights in place."""
    from creditline.engines.torch_engine import TorchEngine
    from creditline.policy.models import load_tokenizer

    new = _architecture(Path(folder))
    if server.folder:
        old = _architecture(Path(server.folder))
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        if changed:
            raise RequestError(
                f"reload_weights: {folder} is not a checkpoint of the served architecture "
                f"(config.json differs in {changed})",
                "kwargs.weights_path",
            )
    engine = server.engine
    if isinstance(engine, TorchEngine):
        engine = TorchEngine.from_checkpoint(folder, engine.device)
        tokenizer = engine.tokenizer  # the one it loaded with the weights
    elif callable(load := getattr(engine, "load", None)):
        load(folder, force=True)  # a VLLMEngine: the same folder may hold new weights
        tokenizer = load_tokenizer(folder)
    else:
        raise RequestError(f"reload_weights: a {type(engine).__name__} cannot load new weights", "method")
    return replace(server, engine=engine, tokenizer=tokenizer, folder=str(folder))


def _architecture(folder: Path) -> dict:
    if not (folder / "config.json").is_file():
        raise RequestError(
            f"reload_weights: {folder} is not a checkpoint folder (no config.json)", "kwargs.weights_path"
        )
    return checkpoint_architecture(folder)


def _error(exc: RequestError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


class _AnnouncingServer(uvicorn.Server):
    """Prints one `serving ... on http://HOST:PORT/v1` line once the socket listens (port 0: the one
    chosen)."""

    def __init__(self, config: uvicorn.Config, announcement: str):
        super().__init__(config)
        self.announcement = announcement

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(self.announcement.format(url=f"http://{host}:{port}/v1"), flush=True)


def load_served_policy(engine_kind: str, folder: str | Path, model_name: str) -> serving.PolicyServer:
    """Load `folder` into an engine ("torch" or "vllm", on the GPU when there is one) with its tokenizer."""
    import torch

    from creditline.engines import make_engine

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return served_policy(make_engine(engine_kind, folder, device=device), folder, model_name)


def served_policy(engine: Engine, folder: str | Path, model_name: str) -> serving.PolicyServer:
    """`engine`, holding `folder`'s weights, served as `model_name` with `folder`'s tokenizer."""
    from creditline.policy.models import load_tokenizer

    return serving.PolicyServer(engine, load_tokenizer(folder), model_name, str(folder))


def serve(server: serving.PolicyServer, host: str = "127.0.0.1", port: int = 8000, seed: int = 0) -> None:
    """Serve until SIGTERM or SIGINT, then return after a graceful shutdown. `port` 0: any free port."""
    if not 0 <= port <= 65_535:  # a socket takes it modulo 65536: 70000 would serve on 4464
        raise ValueError(f"port {port}: must be 1..65535, or 0 for any free port")
    config = uvicorn.Config(
        build_app(server, seed),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    announcement = f"serving {server.folder} as {server.model_name} on {{url}}"
    # uvicorn handles the signals while it runs and re-raises them afterwards with the handlers found at
    # start: make those quiet, so a stop is a clean return rather than an interrupt.
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        _AnnouncingServer(config, announcement).run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(f"stopped serving {server.model_name}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def serving_in_background(server: serving.PolicyServer, seed: int = 0) -> Iterator[str]:
    """Serve `server` on a free 127.0.0.1 port from a thread of this process; yield its `/v1` URL, stop on
    exit.

    For a round whose rollouts or evaluation a verifiers environment plays
    (`creditline.interop.verifiers_source`): it serves the engine the round's stage loaded, and nothing is
    left running if the round fails."""
    config = uvicorn.Config(
        build_app(server, seed),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    http = uvicorn.Server(config)
    thread = threading.Thread(target=http.run, name="creditline-serve", daemon=True)
    thread.start()
    while not http.started:
        if not thread.is_alive():
            raise RuntimeError("the policy server stopped before it listened")
        thread.join(0.05)
    host, port = http.servers[0].sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        http.should_exit = True
        thread.join(30)
