"""The MLflow model registry: every exported variant becomes a new version of the sweep's registered model.

Each variant (full, int8, nf4) is logged with MLflow's transformers flavor as a logged model of the sweep's
parent run, so `mlflow.transformers.load_model("models:/<name>@<variant>")` and `mlflow models serve` work on
it; its test metrics and the winning evaluation are tags of the version; the alias `<variant>` moves to the
newest version of that variant. An export registered again (`finesweep export`) adds versions.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterator

from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import VARIANT_TAG
from finesweep.spaces import SweepConfig, Task

log = logging.getLogger(__name__)

PIPELINE_TASK = {Task.classification: "text-classification", Task.causal_lm: "text-generation"}
BEST_TAGS = ("trial_id", "step", "metric", "value")


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    variant: str
    model_uri: str


def register_export(config: SweepConfig, tracker: Tracker, experiment_id: str, run_id: str, export_dir: Path,
                    metrics: dict[str, dict[str, float]], best: dict) -> list[RegisteredVersion]:
    """Register each variant of `export_dir` (as measured in `metrics`) under the sweep's registered model."""
    name = config.export.registered_model_name or config.name
    task = Task(config.data.task)
    registered = []
    with _fluent_tracking(tracker.uri):
        for variant, values in metrics.items():
            pipeline = _pipeline(export_dir, variant, task)
            registered.append(_register_variant(tracker, experiment_id, run_id, name, task, variant, pipeline,
                                                _card(export_dir), values, best))
    return registered


def _register_variant(tracker: Tracker, experiment_id: str, run_id: str, name: str, task: Task, variant: str,
                      pipeline, card, metrics: dict[str, float], best: dict) -> RegisteredVersion:
    import mlflow

    client = tracker.client
    logged = client.create_logged_model(experiment_id, name=f"{name}-{variant}", source_run_id=run_id,
                                        tags={VARIANT_TAG: variant})
    info = mlflow.transformers.log_model(
        pipeline, name=variant, model_card=card, model_id=logged.model_id, run_id=run_id, task=PIPELINE_TASK[task],
        registered_model_name=name, pip_requirements=_requirements(variant),
    )
    version = str(info.registered_model_version)
    tags = {VARIANT_TAG: variant, **{f"test_{k}": f"{v:.6g}" for k, v in metrics.items()},
            **{f"best_{k}": str(best.get(k)) for k in BEST_TAGS}}
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    client.set_registered_model_alias(name, variant, version)
    log.info("registered %s version %s (%s)", name, version, variant)
    return RegisteredVersion(name, version, variant, f"models:/{name}/{version}")


def _pipeline(export_dir: Path, variant: str, task: Task):
    """The variant as the transformers pipeline MLflow's flavor saves. A quantized variant is quantized again from
    the full folder, as the export did (the same weights): transformers cannot save a reloaded quantized model."""
    from transformers import pipeline

    from finesweep.spaces import Quantization
    from finesweep.trainer.quantize import load_quantized

    full = export_dir / "model"
    model = str(full) if variant == "full" else load_quantized(full, Quantization(variant), task)
    return pipeline(PIPELINE_TASK[task], model=model, tokenizer=str(full))


def _card(export_dir: Path):
    """The export's model card, stored with the logged model (MLflow would otherwise look for one on the hub)."""
    from huggingface_hub import ModelCard

    return ModelCard((export_dir / "README.md").read_text(encoding="utf-8"))


def _requirements(variant: str) -> list[str]:
    """Pinned from this environment: MLflow would otherwise infer them by loading the model in a subprocess."""
    names = ["transformers", "torch", "accelerate", "safetensors"] + ([] if variant == "full" else ["bitsandbytes"])
    pins = []
    for package in names:
        try:
            pins.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            pins.append(package)
    return pins


@contextlib.contextmanager
def _fluent_tracking(uri: str) -> Iterator[None]:
    """MLflow's flavors log through the fluent API, which reads the process-wide tracking and registry URIs: point
    them at the sweep's store for the duration, and put back what was there."""
    import mlflow

    before = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before[0])
        mlflow.set_registry_uri(before[1])
