"""`TrackerResource`: one MLflow run per (experiment, round), found again by its tags.

The embedded default is a sqlite tracking store under the data root with artifacts beside it; any
tracking server works through `tracking_uri`. Each asset adds its metrics to its round's run; the run
carries tags linking it to the experiment, the round, the Dagster run ids and the data versions used.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

ROUND_TAG = "creditline.round"


EXPERIMENT_TAG = "creditline.experiment"


def _flatten(prefix: str, value, out: dict[str, str]) -> dict[str, str]:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = str(value)[:500]
    return out


class TrackerResource(dg.ConfigurableResource):
    data_root: str
    tracking_uri: str = ""
    """Empty: `sqlite:///<data_root>/mlflow.db`."""

    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{Path(self.data_root) / 'mlflow.db'}"

    def client(self):
        import mlflow  # imported here: ~1.5 s, and only the assets that log need it

        # MLflow caches its tracking store per URI: after the first client, a new one costs ~3 ms.
        return mlflow.MlflowClient(tracking_uri=self.uri())

    def round_run(self, experiment: str, round_: int, config: dict) -> str:
        """The MLflow run id of this round, created (with the config as params) on first use."""
        client = self.client()
        found = client.get_experiment_by_name(experiment)
        if found is None:
            location = (Path(self.data_root) / "mlflow-artifacts" / experiment).as_uri()
            experiment_id = client.create_experiment(experiment, artifact_location=location)
        else:
            experiment_id = found.experiment_id
        runs = client.search_runs(
            [experiment_id], filter_string=f"tags.`{ROUND_TAG}` = '{round_}'", max_results=1
        )
        if runs:
            return runs[0].info.run_id
        run = client.create_run(
            experiment_id,
            run_name=f"{experiment} round {round_}",
            tags={EXPERIMENT_TAG: experiment, ROUND_TAG: str(round_)},
        )
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in sorted(_flatten("", config, {}).items())]
        for start in range(0, len(params), 100):
            client.log_batch(run.info.run_id, params=params[start : start + 100])
        return run.info.run_id

    def log(
        self,
        run_id: str,
        metrics: dict[str, float] | None = None,
        tags: dict[str, str] | None = None,
        artifacts: list[str] | None = None,
        step: int = 0,
    ) -> None:
        from mlflow.entities import Metric, RunTag

        client = self.client()
        client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), 0, step) for k, v in (metrics or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )
        for path in artifacts or []:
            client.log_artifact(run_id, path)

    def finish(self, run_id: str) -> None:
        self.client().set_terminated(run_id, "FINISHED")
