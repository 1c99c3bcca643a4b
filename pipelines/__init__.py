"""Wiring only: jobs, sensors and the Definitions that `dagster dev -w workspace.yaml` loads."""
