"""MLflow, explicitly: every call names its run; the tracking URI and run ids are passed, never implied."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient

PARENT_TAG = "mlflow.parentRunId"  # the tag the MLflow UI nests runs by
TRIAL_TAG = "finesweep.trial_id"
END_STATE_TAG = "finesweep.end_state"
ERROR_TAG = "finesweep.error"
RESUMED_TAG = "finesweep.resumed_from_step"
MAX_PARAM_LENGTH = 500


def default_tracking_uri(sweep_dir: Path) -> str:
    """The embedded default: a SQLite store inside the sweep folder."""
    return f"sqlite:///{(sweep_dir / 'mlflow.db').resolve()}"


class Tracker:
    """A thin, explicit wrapper over MlflowClient for the sweep and its trials."""

    def __init__(self, uri: str):
        from mlflow import MlflowClient

        self.uri = uri
        self.client: MlflowClient = MlflowClient(tracking_uri=uri)

    def experiment(self, name: str, artifact_location: Path | None) -> str:
        """The experiment's id, created on first use; a local store keeps artifacts beside it."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = artifact_location.resolve().as_uri() if artifact_location and self.uri.startswith("sqlite") else None
        return self.client.create_experiment(name, artifact_location=location)

    def start_run(self, experiment_id: str, name: str, tags: dict[str, str] | None = None,
                  parent_run_id: str | None = None) -> str:
        tags = dict(tags or {})
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        return self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in sorted(params.items())]
        for start in range(0, len(items), 100):  # log_batch takes at most 100 params per call
            self.client.log_batch(run_id, params=items[start:start + 100])

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items() if _is_number(v)]
        if items:
            self.client.log_batch(run_id, metrics=items)

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        self.client.log_text(run_id, json.dumps(obj, indent=2, default=str), artifact_file)

    def log_file(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def is_running(self, run_id: str) -> bool:
        return self.client.get_run(run_id).info.status == "RUNNING"

    def trial_run(self, experiment_id: str, parent_run_id: str, trial_id: str) -> str | None:
        """The nested run a trial created, found by its tags."""
        runs = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}' and tags.`{TRIAL_TAG}` = '{trial_id}'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def trial_runs(self, experiment_id: str, parent_run_id: str) -> list:
        return self.client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
                                       max_results=10000)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
