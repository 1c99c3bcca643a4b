"""Before a command touches anything: every server the deployment names answers, or one line says which does
not.

A store that is down would otherwise surface minutes later as a traceback from deep inside Dagster, DuckDB
or MLflow, after part of a round had been written. Each check is one short connection with a timeout.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from creditline.config.deployment import Deployment, redact
from creditline.errors import CreditlineError

TIMEOUT_S = 5


class StoreUnreachable(CreditlineError, ConnectionError):
    """A server named by the deployment did not answer; says which setting, which address and why."""

    def __init__(self, deployment: Deployment, setting: str, uri: str, reason: str) -> None:
        super().__init__(
            f"deployment {deployment.source}: {setting} {redact(uri)} is unreachable: "
            f"{reason.strip().splitlines()[0]}"
        )


def check_reachable(deployment: Deployment, generation: bool = True) -> None:
    """Raise `StoreUnreachable` for the first server of `deployment` that does not answer (none: local
    profile); the generation replicas only with `generation` (commands that generate: a replica down does not
    stop `verify`)."""
    for setting, uri in (
        ("[dagster] postgres_url", deployment.dagster.postgres_url),
        ("[lineage] catalog", deployment.lineage.catalog),
    ):
        if uri:
            _postgres(deployment, setting, uri)
    if deployment.tracking.uri.startswith(("http://", "https://")):
        _mlflow(deployment, deployment.tracking.uri)
    if deployment.storage.uri:
        _storage(deployment)
    for url in deployment.generation.endpoints if generation else ():
        _endpoint(deployment, url)


def _endpoint(deployment: Deployment, url: str) -> None:
    """A generation replica answers `/v1/models` (vLLM's and `creditline serve`'s model list), reached
    directly as the engine reaches it, never through an HTTP proxy named in the environment."""
    models = f"{url.rstrip('/').removesuffix('/v1')}/v1/models"
    _http_get(deployment, "[generation] endpoints", url, models, proxies={})


def _postgres(deployment: Deployment, setting: str, uri: str) -> None:
    import psycopg2  # the `server` extra (dagster-postgres needs it too)

    try:
        psycopg2.connect(uri, connect_timeout=TIMEOUT_S).close()
    except psycopg2.Error as error:
        raise StoreUnreachable(deployment, setting, uri, str(error)) from None


def _mlflow(deployment: Deployment, uri: str) -> None:
    _http_get(deployment, "[tracking] uri", uri, f"{uri.rstrip('/')}/health")


def _http_get(deployment: Deployment, setting: str, uri: str, url: str, proxies: dict | None = None) -> None:
    """GET `url` (the server `setting` names as `uri`), or `StoreUnreachable`; `proxies` {}: none, None: the
    environment's."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    try:
        with opener.open(url, timeout=TIMEOUT_S) as response:
            response.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StoreUnreachable(deployment, setting, uri, str(reason)) from None


def _storage(deployment: Deployment) -> None:
    """Look the storage prefix up in a daemon thread with a deadline: an S3 client retries an endpoint that
    does not answer for much longer than a person waits, and a daemon thread never keeps the process alive."""
    import threading

    from creditline.store.objects import ObjectStore

    options = dict(deployment.storage.options)
    if deployment.storage.uri.startswith("s3://"):  # one quick try, not botocore's retries with backoff
        options.setdefault(
            "config_kwargs",
            {"connect_timeout": TIMEOUT_S, "read_timeout": TIMEOUT_S, "retries": {"max_attempts": 1}},
        )
    objects = ObjectStore(deployment.storage.uri, "", options)
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            objects.filesystem().exists(deployment.storage.uri)
            outcome.append(None)
        except BaseException as error:  # the filesystem's own errors: refused, no such bucket, denied
            outcome.append(error)

    thread = threading.Thread(target=probe, name="storage-probe", daemon=True)
    thread.start()
    thread.join(timeout=2 * TIMEOUT_S)
    if not outcome:
        raise StoreUnreachable(
            deployment, "[storage] uri", deployment.storage.uri, f"no answer within {2 * TIMEOUT_S} s"
        )
    if outcome[0] is not None:
        error = outcome[0]
        raise StoreUnreachable(
            deployment, "[storage] uri", deployment.storage.uri, str(error) or type(error).__name__
        )
