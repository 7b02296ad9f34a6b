"""The MLflow model registry: every exported variant becomes a new version of the sweep's registered model.

Each variant (full, int8, nf4) is logged with MLflow's transformers flavor, onnx-int8 with its onnx flavor, as a
logged model of the sweep's parent run, so `mlflow.transformers.load_model("models:/<name>@<variant>")` (or
`mlflow.onnx.load_model`) and `mlflow models serve` work on it; its test metrics and the winning evaluation are tags of the version; the alias `<variant>` moves to the
newest version of that variant. An export registered again (`finesweep export`) adds versions. A GGUF variant stays a
file of the export folder: MLflow has no flavor for llama.cpp's files.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterator

from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import VARIANT_TAG
from finesweep.spaces import Quantization, SweepConfig, Task
from finesweep.trainer.models import PIPELINE_TASKS
from finesweep.trainer.serving.onnx_runtime import ONNX_FILE, is_onnx_folder
from finesweep.trainer.serving.quantize import load_quantized

log = logging.getLogger(__name__)

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
    # MLflow prints each registration ("Successfully registered model ...", "Created version ...") to stderr:
    # the sweep's log keeps them, the console says "Registered models:/..." once.
    with _fluent_tracking(tracker.uri), contextlib.redirect_stderr(_LogLines(log)):
        for variant, values in metrics.items():
            if variant != "full" and Quantization(variant).is_gguf:
                # MLflow has no flavor for a llama.cpp file: the export folder and the card keep it.
                log.info("registry: %s is a GGUF file for llama.cpp, not registered (it is in %s)", variant,
                         export_dir / f"model-{variant}")
                continue
            log_model = (_onnx_logger(export_dir, variant) if _is_onnx(export_dir, variant)
                         else _transformers_logger(export_dir, variant, task))
            registered.append(_register_variant(tracker, experiment_id, run_id, name, variant, log_model, values, best))
    return registered


def _transformers_logger(export_dir: Path, variant: str, task: Task) -> Callable[..., Any]:
    """Logs the variant with MLflow's transformers flavor, as a pipeline with the export's model card."""
    import mlflow

    pipeline, card = _pipeline(export_dir, variant, task), _card(export_dir)
    names = ["transformers", "torch", "accelerate", "safetensors"] + ([] if variant == "full" else ["bitsandbytes"])
    return lambda **where: mlflow.transformers.log_model(pipeline, model_card=card, task=PIPELINE_TASKS[task],
                                                         pip_requirements=_requirements(names), **where)


def _is_onnx(export_dir: Path, variant: str) -> bool:
    return variant != "full" and is_onnx_folder(export_dir / f"model-{variant}")


def _onnx_logger(export_dir: Path, variant: str) -> Callable[..., Any]:
    """Logs the variant with MLflow's onnx flavor (`mlflow.onnx.load_model`, `mlflow models serve`), its tokenizer
    and configs beside the graph as extra files (the graph's weights file is the flavor's to write)."""
    import mlflow
    import onnx

    folder = export_dir / f"model-{variant}"
    graph = onnx.load(str(folder / ONNX_FILE))
    extra = [str(path) for path in sorted(folder.iterdir()) if not path.name.startswith(ONNX_FILE)]
    return lambda **where: mlflow.onnx.log_model(graph, extra_files=extra,
                                                 pip_requirements=_requirements(["onnxruntime", "onnx"]), **where)


def _register_variant(tracker: Tracker, experiment_id: str, run_id: str, name: str, variant: str,
                      log_model: Callable[..., Any], metrics: dict[str, float], best: dict) -> RegisteredVersion:
    client = tracker.client
    logged = client.create_logged_model(experiment_id, name=f"{name}-{variant}", source_run_id=run_id,
                                        tags={VARIANT_TAG: variant})
    info = log_model(name=variant, model_id=logged.model_id, run_id=run_id, registered_model_name=name)
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

    full = export_dir / "model"
    model = str(full) if variant == "full" else load_quantized(full, Quantization(variant), task)
    return pipeline(PIPELINE_TASKS[task], model=model, tokenizer=str(full))


def _card(export_dir: Path):
    """The export's model card, stored with the logged model (MLflow would otherwise look for one on the hub)."""
    from huggingface_hub import ModelCard

    return ModelCard((export_dir / "README.md").read_text(encoding="utf-8"))


def _requirements(names: list[str]) -> list[str]:
    """The packages pinned from this environment: MLflow would otherwise infer them by loading the model in a
    subprocess."""
    pins = []
    for package in names:
        try:
            pins.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            pins.append(package)
    return pins


class _LogLines(io.TextIOBase):
    """A text stream whose lines become INFO records of `logger` (what a library prints lands in the sweep's log)."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self.logger, self.pending = logger, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in filter(str.strip, lines):
            self.logger.info("mlflow: %s", line)
        return len(text)


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
