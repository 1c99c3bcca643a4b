"""The HTTP shell around `creditline.serving`: vLLM's routes on a Starlette app, run by uvicorn.

Routes (vLLM's paths; the OpenAI ones under `/v1`, vLLM's own at the root):

    GET  /health                       200 once the engine is loaded
    GET  /v1/models                    one model card, with `max_model_len`
    POST /v1/chat/completions          chat, rendered with the checkpoint's chat template
    POST /v1/chat/completions/tokens   the same with the prompt given as ids (`tokens`; prime-rl's route,
                                       used by verifiers 0.3.1's token client after the first turn)
    POST /v1/completions               text or token-id prompts
    POST /inference/v1/generate        tokens in, tokens out (verifiers 0.4.0's training client)
    POST /tokenize                     messages or a prompt to ids

Engines are not thread-safe and a `TorchEngine` samples a batch's rows from one generator, so requests
are answered one at a time (a lock around each engine call, run off the event loop); throughput at scale
comes from serving with `--engine vllm` or from `vllm serve` itself. Requests without a `seed` take
`serving.fallback_seed(server seed, n)` for the n-th such request, so a server restarted with the same
`--seed` answers the same request sequence with the same completions.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from creditline import serving
from creditline.serving_requests import RequestError, prompt_token_ids


class _RequestCounter:
    """Numbers the requests that name no seed, under the engine lock."""

    def __init__(self, server_seed: int):
        self.server_seed, self.count = server_seed, 0

    def next_seed(self) -> int:
        seed = serving.fallback_seed(self.server_seed, self.count)
        self.count += 1
        return seed


def build_app(server: serving.PolicyServer, seed: int = 0) -> Starlette:
    """The ASGI app answering vLLM's routes with `server`'s engine; `seed` is the server's `--seed`."""
    engine_lock, counter = threading.Lock(), _RequestCounter(seed)

    def seeded(answer):
        def call(body: dict) -> dict:
            with engine_lock:
                return answer(server, body, counter.next_seed())

        return call

    def chat_tokens(server_, body: dict, fallback: int) -> dict:
        tokens = body.get("tokens") if isinstance(body, dict) else None
        ids = prompt_token_ids(server_.tokenizer, tokens, field="tokens", batch=False)[0]
        return serving.chat_completion(server_, body, fallback, prompt_ids=ids)

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
                return JSONResponse({"error": {"message": message, "type": "InternalServerError",
                                               "param": None, "code": 500}}, status_code=500)  # fmt: skip

        return endpoint

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse(serving.models(server))

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", post(seeded(serving.chat_completion)), methods=["POST"]),
        Route("/v1/chat/completions/tokens", post(seeded(chat_tokens)), methods=["POST"]),
        Route("/v1/completions", post(seeded(serving.completion)), methods=["POST"]),
        Route("/inference/v1/generate", post(seeded(serving.generate_tokens)), methods=["POST"]),
        Route("/tokenize", post(lambda body: serving.tokenize(server, body)), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _error(exc: RequestError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


class _AnnouncingServer(uvicorn.Server):
    """Prints one `serving ... on http://HOST:PORT/v1` line once the socket listens (port 0: the one chosen)."""

    def __init__(self, config: uvicorn.Config, announcement: str):
        super().__init__(config)
        self.announcement = announcement

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(self.announcement.format(url=f"http://{host}:{port}/v1"), flush=True)


def load_served_policy(engine_kind: str, folder: str | Path, model_name: str) -> serving.PolicyServer:
    """Load `folder` into an engine ("torch": on the GPU when there is one; "vllm") with its tokenizer."""
    import torch

    from creditline.engines import make_engine
    from creditline.policy import load_tokenizer

    device = "cuda" if engine_kind == "torch" and torch.cuda.is_available() else "cpu"
    engine = make_engine(engine_kind, folder, device=device)
    return serving.PolicyServer(engine, load_tokenizer(folder), model_name, str(folder))


def serve(server: serving.PolicyServer, host: str = "127.0.0.1", port: int = 8000, seed: int = 0) -> None:
    """Serve until SIGTERM or SIGINT, then return after a graceful shutdown."""
    config = uvicorn.Config(build_app(server, seed), host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)  # fmt: skip
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
    """Serve `server` on a free 127.0.0.1 port from a thread of this process; yield its `/v1` URL, stop on exit.

    For a round whose rollouts a verifiers environment plays (`creditline.verifiers_source`): the policy is
    loaded once, here, and nothing is left running if the round fails."""
    config = uvicorn.Config(build_app(server, seed), host="127.0.0.1", port=0, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5)  # fmt: skip
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
