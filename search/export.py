"""Export the best checkpoint: full-precision folder, quantized folders, test metrics of each, and a model card.

Every variant is measured from the folder it was saved to, i.e. exactly what the user will load.
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from finesweep.spaces import Quantization, SweepConfig, Task

log = logging.getLogger(__name__)

FULL = "full"
ADAPTER = "adapter"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# The metric each task's warning watches, and whether a larger value is better.
PRIMARY = {Task.classification: ("accuracy", True), Task.causal_lm: ("perplexity", False)}


@dataclass
class ExportResult:
    folder: Path
    metrics: dict[str, dict[str, float]]
    """Variant ("full", "int8", "nf4") -> test metrics, plus "size_bytes"."""
    warnings: list[str] = field(default_factory=list)
    """E.g. "int8: accuracy fell by 0.023 (> export.max_metric_drop 0.01)"."""
    adapter: Path | None = None
    """The LoRA adapter alone (weights, config, tokenizer), when the winner was a LoRA trial."""

    def variant_folder(self, variant: str) -> Path:
        return self.folder / _folder(variant)


def export_best(
    *,
    config: SweepConfig,
    checkpoint_dir: Path,
    tokenizer_source: Path,
    test_split: Any,
    collate: Callable,
    best: dict,
    out_dir: Path,
    label_names: list[str] | None = None,
) -> ExportResult:
    """Write out_dir/{model, model-<method>..., [adapter], metrics.json, sweep.json, README.md}; return metrics
    and warnings. A LoRA winner is exported merged (`model`) and also as the adapter alone (`adapter`).

    `label_names` is only needed for a LoRA checkpoint whose folder holds no config with id2label and whose test
    split has no ClassLabel feature (the base model's head is rebuilt from them before the adapter is merged).
    """
    task = Task(config.data.task)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    full_dir = _fresh(out_dir / "model")
    _save_full(config, Path(checkpoint_dir), Path(tokenizer_source), best, full_dir, label_names or _split_labels(test_split))
    adapter = _save_adapter(Path(checkpoint_dir), full_dir, _fresh(out_dir / ADAPTER)) if _is_adapter(Path(checkpoint_dir)) else None
    if adapter is None:
        shutil.rmtree(out_dir / ADAPTER, ignore_errors=True)  # a re-export of a full fine-tune keeps no stale adapter
    from finesweep.trainer.quantize import linear_layer_names, quantize

    layers = linear_layer_names(full_dir, task)
    metrics = {FULL: _measure(full_dir, task, test_split, collate, layers)}
    for method in _methods(config):
        folder = quantize(full_dir, method, _fresh(out_dir / f"model-{method.value}"), task)
        metrics[method.value] = _measure(folder, task, test_split, collate, layers)
    warnings = drop_warnings(metrics, task, config.export.max_metric_drop)
    for warning in warnings:
        log.warning("export: %s", warning)
    _write_json(out_dir / "metrics.json", metrics)
    _write_json(out_dir / "sweep.json", config.model_dump(mode="json"))
    (out_dir / "README.md").write_text(model_card(config, best, metrics, warnings, adapter is not None), encoding="utf-8")
    return ExportResult(folder=out_dir, metrics=metrics, warnings=warnings, adapter=adapter)


def check_backends(config: SweepConfig) -> None:
    """Before any trial runs: every export.quantization method's library is installed (an export that fails after
    hours of search for want of a pip install would waste them)."""
    from finesweep.spaces import SweepFileError
    from finesweep.trainer.quantize import missing_backend

    missing = {m.value: install for m in _methods(config) if (install := missing_backend(m))}
    if missing:
        raise SweepFileError(
            f"export.quantization: {', '.join(missing)} needs a library that is not installed here. "
            f"Install it ({'; '.join(sorted(set(missing.values())))}) or remove {', '.join(missing)} from the list.")


def _methods(config: SweepConfig) -> list[Quantization]:
    """The quantized variants to make, in the order written, without none and without repeats."""
    return list(dict.fromkeys(q for q in config.export.quantization if q != Quantization.none))


def _fresh(folder: Path) -> Path:
    """An empty folder: a re-export must not leave shards of an earlier one beside the new weights."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


# --- the full-precision model -------------------------------------------------------------------------------


def _save_full(config: SweepConfig, checkpoint_dir: Path, tokenizer_source: Path, best: dict, out: Path,
               label_names: list[str] | None) -> None:
    """The winning checkpoint (LoRA adapters merged) saved as safetensors with its tokenizer."""
    task = Task(config.data.task)
    if _is_adapter(checkpoint_dir):
        model = _merged_lora(config, checkpoint_dir, best, label_names or _config_labels(checkpoint_dir))
    else:
        from finesweep.trainer.models import load_checkpoint

        model = load_checkpoint(str(checkpoint_dir), task, trust_remote_code=config.trust_remote_code)
    tokenizer = _tokenizer(tokenizer_source, config.trust_remote_code)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # batched classification needs it in the config
    _complete_generation_config(model, tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _complete_generation_config(model: Any, tokenizer: Any) -> None:
    """A causal LM's generation_config.json (saved with it) names the tokens generate() pads and stops with, so
    `model.generate(...)` on the export neither warns nor runs past the end of a response."""
    generation = getattr(model, "generation_config", None)
    if generation is None or not model.can_generate():
        return
    if generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id
    if generation.eos_token_id is None:
        generation.eos_token_id = tokenizer.eos_token_id


def _is_adapter(checkpoint_dir: Path) -> bool:
    return (checkpoint_dir / ADAPTER_FILES[0]).exists()


def _save_adapter(checkpoint_dir: Path, full_dir: Path, out: Path) -> Path:
    """The adapter alone, for users who keep one base model and swap adapters: its weights and config as the
    trial saved them (a classifier's head is inside, as a module to save) and the tokenizer."""
    for name in ADAPTER_FILES:
        shutil.copy2(checkpoint_dir / name, out / name)
    for tokenizer_file in full_dir.glob("*token*"):
        shutil.copy2(tokenizer_file, out / tokenizer_file.name)
    return out


def _merged_lora(config: SweepConfig, adapter_dir: Path, best: dict, label_names: list[str] | None) -> Any:
    """The candidate's base model (same overrides and head as in the trial) with the adapter merged into it."""
    from peft import PeftModel

    from finesweep.trainer.models import load_model

    task = Task(config.data.task)
    if task == Task.classification and not label_names:
        raise ValueError(
            f"{adapter_dir} is a LoRA adapter without a config naming its labels; pass label_names to export_best"
        )
    base = load_model(config.candidate(best["model"]), task, label_names, config.trust_remote_code)
    return PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()


def _config_labels(folder: Path) -> list[str] | None:
    """Label names from a config.json in `folder`, if it has one with a non-default id2label."""
    path = folder / "config.json"
    if not path.exists():
        return None
    id2label = json.loads(path.read_text(encoding="utf-8")).get("id2label") or {}
    return [id2label[key] for key in sorted(id2label, key=int)] or None


def _split_labels(split: Any) -> list[str] | None:
    """Label names from a ClassLabel `labels` feature of the test split, if it has one."""
    feature = (getattr(split, "features", None) or {}).get("labels")
    return list(feature.names) if getattr(feature, "names", None) else None


def _tokenizer(source: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # saved with it, so the export pads the way the trials did
    return tokenizer


# --- measuring ----------------------------------------------------------------------------------------------


def _measure(folder: Path, task: Task, test_split: Any, collate: Callable, layers: list[str]) -> dict[str, float]:
    """Test metrics, size on disk (whole model and its linear `layers`, which quantization shrinks while the
    embeddings stay as they are) and latency of the model saved in `folder`, loaded as a user would."""
    import torch

    from finesweep.trainer.evaluate import evaluate, folder_size_bytes, layer_bytes, saved_tensors
    from finesweep.trainer.models import load_checkpoint

    model = load_checkpoint(str(folder), task)
    if torch.cuda.is_available() and not getattr(model, "is_quantized", False):
        model.to("cuda")  # quantized ones load onto the GPU already; same device keeps the latencies comparable
    metrics = evaluate(model, test_split, collate, task)
    metrics["size_bytes"] = float(folder_size_bytes(folder))
    metrics["linear_layers_bytes"] = float(layer_bytes(saved_tensors(folder), layers))
    del model
    gc.collect()
    return metrics


def drop_warnings(metrics: dict[str, dict[str, float]], task: Task, max_drop: float) -> list[str]:
    """One line per quantized variant whose primary metric is worse than the full model's by more than max_drop.

    Accuracy: absolute drop. Perplexity: relative rise (a perplexity of 40 vs 38 is 5% worse).
    """
    name, higher_is_better = PRIMARY[Task(task)]
    full = metrics[FULL][name]
    warnings = []
    for variant, values in metrics.items():
        if variant == FULL:
            continue
        if higher_is_better and full - values[name] > max_drop:
            warnings.append(f"{variant}: {name} fell by {full - values[name]:.3f} (> export.max_metric_drop {max_drop:g})")
        elif not higher_is_better and (values[name] - full) / full > max_drop:
            rise = (values[name] - full) / full
            warnings.append(f"{variant}: {name} rose by {rise:.1%} (> export.max_metric_drop {max_drop:g}, relative)")
    return warnings


# --- the model card -----------------------------------------------------------------------------------------


def model_card(config: SweepConfig, best: dict, metrics: dict[str, dict[str, float]], warnings: list[str],
               has_adapter: bool = False) -> str:
    """README.md of the export folder: where the model came from, how it was chosen, how well each variant does."""
    task = Task(config.data.task)
    parts = [
        f"# {config.name}: fine-tuned {best.get('model', '?')}\n",
        "Exported by finesweep: the best evaluation of a hyperparameter and batch-size sweep, "
        "measured on the held-out test split, in full precision and quantized.\n",
        _origin_section(config, best, task),
        _params_section(best),
        _metrics_section(metrics, task, warnings),
        _usage_section(metrics, task),
        _adapter_section(config, best, task) if has_adapter else "",
    ]
    return "\n".join(parts)


def _origin_section(config: SweepConfig, best: dict, task: Task) -> str:
    name = best.get("model", "?")
    candidate = next((m for m in config.models if m.name == name), None)
    source = "unknown"
    if candidate is not None:
        source = f"path `{candidate.path}`" if candidate.path else f"hub id `{candidate.hub_id}`"
        if candidate.gguf_file:
            source += f" (GGUF file `{candidate.gguf_file}`)"
    columns = (f"text `{config.data.text_column}`, label `{config.data.label_column}`" if task == Task.classification
               else f"prompt `{config.data.prompt_column}`, response `{config.data.response_column}`")
    return "\n".join([
        "## Origin\n",
        f"- Base model: candidate `{name}`, {source}",
        f"- Task: {task.value}",
        f"- Data: `{config.data.path}` (columns: {columns})",
        f"- Sweep: `{config.name}`, seed {config.seed}, {config.search.num_trials} trials, "
        f"search metric `{config.search.metric}` ({config.search.mode})",
        "",
    ])


def _params_section(best: dict) -> str:
    rows = [f"| `{key}` | {_fmt(value)} |" for key, value in sorted(best.get("params", {}).items())]
    return "\n".join([
        "## Winning hyperparameters\n",
        f"Best validation {best.get('metric', '?')} = {_fmt(best.get('value'))} at step {best.get('step', '?')} "
        f"of trial `{best.get('trial_id', '?')}`.\n",
        "| hyperparameter | value |",
        "|---|---|",
        *rows,
        "",
    ])


def _metrics_section(metrics: dict[str, dict[str, float]], task: Task, warnings: list[str]) -> str:
    names = ["accuracy", "f1_macro", "loss"] if task == Task.classification else ["loss", "perplexity"]
    header = ["variant", "folder", *names, "size on disk", "linear layers", "latency (ms/sample, batch 32)"]
    lines = ["## Test metrics\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    full_linear = metrics.get(FULL, {}).get("linear_layers_bytes") or 0
    for variant, values in metrics.items():
        linear = values.get("linear_layers_bytes") or 0
        smaller = f" ({full_linear / linear:.2f}x smaller)" if variant != FULL and linear else ""
        cells = [variant, f"`{_folder(variant)}`", *[_fmt(values.get(n)) for n in names],
                 _size(values.get("size_bytes", 0)), _size(linear) + smaller, _fmt(values.get("latency_ms_per_sample"))]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"> Warning: {w}" for w in warnings]
    return "\n".join(lines) + ("\n" if warnings else "")


def _usage_section(metrics: dict[str, dict[str, float]], task: Task) -> str:
    auto = "AutoModelForSequenceClassification" if task == Task.classification else "AutoModelForCausalLM"
    lines = ["## How to load\n", "Every folder loads with plain transformers (weights are safetensors):\n"]
    from finesweep.trainer.quantize import BACKENDS

    for variant in metrics:
        if variant != FULL:
            package = BACKENDS[Quantization(variant)][0]
            lines.append(f"`{_folder(variant)}` is {package}-quantized ({variant}): also `pip install {package}`; "
                         "its quantization settings are in its config.json.\n")
    lines += [
        "```python",
        f"from transformers import AutoTokenizer, {auto}",
        "",
        *[f'model = {auto}.from_pretrained("{_folder(v)}")  # {v}' for v in metrics],
        f'tokenizer = AutoTokenizer.from_pretrained("{_folder(FULL)}")',
        "```",
        "",
    ]
    return "\n".join(lines)


def _adapter_section(config: SweepConfig, best: dict, task: Task) -> str:
    """How to put the LoRA adapter alone on its base model (peft), for users who share one base across adapters."""
    auto = "AutoModelForSequenceClassification" if task == Task.classification else "AutoModelForCausalLM"
    candidate = next((m for m in config.models if m.name == best.get("model")), None)
    base = (candidate.path or candidate.hub_id) if candidate else "<base model>"
    head = ', num_labels=len(labels), id2label=dict(enumerate(labels))' if task == Task.classification else ""
    return "\n".join([
        "## The LoRA adapter alone\n",
        f"`{ADAPTER}` holds the winning LoRA adapter (the classification head is inside it) and the tokenizer; "
        f"`model` is the same adapter merged into the base. The adapter applies to the base model `{base}`"
        + (f" with `config_overrides` {candidate.config_overrides}" if candidate and candidate.config_overrides else "")
        + " (`pip install peft`):\n",
        "```python",
        "from peft import PeftModel",
        f"from transformers import {auto}",
        "",
        *(['labels = [...]  # as in model/config.json id2label'] if task == Task.classification else []),
        f'base = {auto}.from_pretrained("{base}"{head})',
        f'model = PeftModel.from_pretrained(base, "{ADAPTER}")',
        "```",
        "",
    ])


def _folder(variant: str) -> str:
    return "model" if variant == FULL else f"model-{variant}"


def _size(size_bytes: float) -> str:
    return f"{size_bytes / 1e6:.2f} MB" if size_bytes >= 1e5 else f"{size_bytes / 1e3:.1f} kB"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
