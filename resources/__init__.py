"""Dagster resources: thin adapters that give assets the core's store, tracker and engines."""

import json

from creditline.config.deployment import Deployment, load_deployment
from creditline.store.data_root import default_data_root
from resources.engine import EngineResource
from resources.lineage import LineageResource
from resources.tracker import TrackerResource


def deployed_resources(data_root: str, deployment: Deployment | None = None) -> dict:
    """The resources of `data_root` under `deployment` (default: `$CREDITLINE_DEPLOYMENT`'s, else local):
    the one place where a deployment's stores reach the assets, the CLI and the reaper."""
    deployment = deployment or load_deployment()
    return {
        "lineage": LineageResource(
            data_root=data_root,
            catalog=deployment.lineage.catalog,
            storage_uri=deployment.storage.uri,
            storage_options_json=json.dumps(deployment.storage.options, sort_keys=True),
        ),
        "tracker": TrackerResource(data_root=data_root, tracking_uri=deployment.tracking.uri),
        "engine": EngineResource(
            train_processes=deployment.training.processes,
            train_sharding=deployment.training.sharding,
            generation_endpoints=list(deployment.generation.endpoints),
            generation_model=deployment.generation.model,
            tensor_parallel_size=deployment.generation.tensor_parallel_size,
        ),
    }


__all__ = ["EngineResource", "LineageResource", "TrackerResource", "default_data_root", "deployed_resources"]
