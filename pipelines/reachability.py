"""Before a command touches anything: every server the deployment names answers, or one line says which does not.

A store that is down would otherwise surface minutes later as a traceback from deep inside Dagster, DuckDB
or MLflow, after part of a round had been written. Each check is one short connection with a timeout.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from creditline.deployment import Deployment, redact

TIMEOUT_S = 5


class StoreUnreachable(ConnectionError):
    """A server named by the deployment did not answer; says which setting, which address and why."""

    def __init__(self, deployment: Deployment, setting: str, uri: str, reason: str) -> None:
        super().__init__(
            f"deployment {deployment.source}: {setting} {redact(uri)} is unreachable: {reason.strip().splitlines()[0]}"
        )


def check_reachable(deployment: Deployment) -> None:
    """Raise `StoreUnreachable` for the first server of `deployment` that does not answer (none: local profile)."""
    for setting, uri in (("[dagster] postgres_url", deployment.dagster.postgres_url),
                         ("[lineage] catalog", deployment.catalog)):  # fmt: skip
        if uri:
            _postgres(deployment, setting, uri)
    if deployment.tracking_uri.startswith(("http://", "https://")):
        _mlflow(deployment, deployment.tracking_uri)
    if deployment.storage_uri:
        _storage(deployment)


def _postgres(deployment: Deployment, setting: str, uri: str) -> None:
    import psycopg2  # the `server` extra (dagster-postgres needs it too)

    try:
        psycopg2.connect(uri, connect_timeout=TIMEOUT_S).close()
    except psycopg2.Error as error:
        raise StoreUnreachable(deployment, setting, uri, str(error)) from None


def _mlflow(deployment: Deployment, uri: str) -> None:
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=TIMEOUT_S) as response:
            response.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StoreUnreachable(deployment, "[tracking] uri", uri, str(reason)) from None


def _storage(deployment: Deployment) -> None:
    """List the storage prefix in a thread with a deadline: an S3 client retries an endpoint that does not
    answer for much longer than a person waits."""
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as Timeout

    from creditline.store.objects import ObjectStore

    objects = ObjectStore(deployment.storage_uri, "", deployment.storage_options)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(
            lambda: objects.filesystem().ls(deployment.storage_uri.split("://", 1)[-1].split("/", 1)[0])
        ).result(timeout=2 * TIMEOUT_S)
    except Timeout:
        raise StoreUnreachable(
            deployment, "[storage] uri", deployment.storage_uri, f"no answer within {2 * TIMEOUT_S} s"
        ) from None
    except Exception as error:  # the filesystem's own errors: no such bucket, refused, denied
        raise StoreUnreachable(
            deployment, "[storage] uri", deployment.storage_uri, str(error) or type(error).__name__
        ) from None
    finally:
        pool.shutdown(wait=False)
