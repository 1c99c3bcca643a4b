"""Dagster resources: thin adapters that give assets the core's store, tracker and engines."""

from resources.engine import EngineResource
from resources.lineage import LineageResource, default_data_root
from resources.tracker import TrackerResource

__all__ = ["EngineResource", "LineageResource", "TrackerResource", "default_data_root"]
