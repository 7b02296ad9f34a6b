"""Loading an exported folder, whatever runs it: an onnx-int8 folder as an ONNX Runtime session that answers the
calls a transformers model answers (`OnnxClassifier`, `OnnxCausalLM`), a GGUF folder in llama.cpp (`GgufCausalLM`), any other (full precision, or a quantized
variant whose config.json carries its quantization_config) through transformers. Prediction, the export's
measurements and the benchmarks load through here; the registry re-quantizes from the full folder instead, because
transformers cannot save a reloaded quantized model (search/tracking/registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from finesweep.spaces import Task
from finesweep.trainer.models import load_checkpoint
from finesweep.trainer.serving.gguf_runtime import GgufCausalLM, is_gguf_folder
from finesweep.trainer.serving.onnx_decoder import OnnxCausalLM
from finesweep.trainer.serving.onnx_runtime import OnnxClassifier, is_onnx_folder


def load_exported(folder: str | Path, task: Task, **extra: Any) -> Any:
    """The model an export saved in `folder`, ready to run. `extra`: from_pretrained's keywords (device_map, ...)
    for a transformers folder; an ONNX or GGUF folder runs on the CPU and takes none."""
    if is_gguf_folder(Path(folder)):
        return GgufCausalLM(Path(folder))
    if is_onnx_folder(Path(folder)):
        return OnnxCausalLM(str(folder)) if Task(task) == Task.causal_lm else OnnxClassifier(str(folder))
    return load_checkpoint(str(folder), task, **extra)
