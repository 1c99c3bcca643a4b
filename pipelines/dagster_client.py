"""A few GraphQL calls to a running `dagster dev` / webserver (stdlib only: urllib)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

URL_ENV = "CREDITLINE_DAGSTER_URL"
DEFAULT_URL = "http://127.0.0.1:3000"

LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on InvalidSubsetError { message }
    ... on UnauthorizedError { message }
  }
}"""


class DagsterGraphQLError(RuntimeError):
    pass


def dagster_url(url: str | None = None) -> str:
    return (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def is_running(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/server_info", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def graphql(url: str, query: str, variables: dict | None = None, timeout_s: float = 60.0) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        payload = json.loads(response.read())
    if payload.get("errors"):
        raise DagsterGraphQLError(json.dumps(payload["errors"])[:2000])
    return payload["data"]


def launch_backfill(url: str, partition_names: list[str], asset_paths: list[str], title: str) -> str:
    """Launch an asset backfill over `partition_names`; return its id."""
    params = {
        "partitionNames": partition_names,
        "assetSelection": [{"path": [p]} for p in asset_paths],
        "title": title,
    }
    result = graphql(url, LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise DagsterGraphQLError(f"{result['__typename']}: {result.get('message', '')}")
    return result["backfillId"]


LINEAGE_RESOURCES = """
{ repositoriesOrError { ... on RepositoryConnection { nodes {
    allTopLevelResourceDetails { name configuredValues { key value } } } } } }"""

BACKFILL_STATUS = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status }
    ... on PythonError { message }
  }
}"""
FINISHED = ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED")
"""A backfill in one of these states launches nothing more."""


def served_stores(url: str) -> set[tuple[str, str]]:
    """(data root, catalog) of the `lineage` resource of every code location the webserver serves: where a
    backfill it runs reads and writes."""
    nodes = graphql(url, LINEAGE_RESOURCES)["repositoriesOrError"].get("nodes", [])
    served = set()
    for node in nodes:
        for resource in node["allTopLevelResourceDetails"]:
            if resource["name"] == "lineage":
                values = {v["key"]: json.loads(v["value"]) for v in resource["configuredValues"]}
                served.add((str(values.get("data_root", "")), str(values.get("catalog") or "")))
    return served


def backfill_status(url: str, backfill_id: str) -> str:
    """The backfill's status (REQUESTED while it is still launching runs; one of FINISHED after)."""
    result = graphql(url, BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
    if result["__typename"] != "PartitionBackfill":
        raise DagsterGraphQLError(f"{result['__typename']}: {result.get('message', '')}")
    return result["status"]
