"""Export the best checkpoint: full-precision folder, quantized folders, test metrics of each, and a model card.

Every variant is measured from the folder it was saved to, i.e. exactly what the user will load.
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from finesweep.search.outputs.card import FULL, UNTUNED, model_card
from finesweep.search.outputs.card_loading import ADAPTER, variant_folder
from finesweep.search.outputs.variants import not_made_paragraph, quantized_methods
from finesweep.search.probe.cores import cap_torch_threads
from finesweep.search.budget.export_time import REFERENCES
from finesweep.search.selection import baseline as baseline_comparison
from finesweep.search.selection.baseline import majority_class_warnings
from finesweep.search.selection.deploy import CPU_PREFIX, PRIMARY, TIMINGS, deploy_choices, metric_loss, with_speedups
from finesweep.spaces import SweepConfig, Task
from finesweep.spaces.config import ExportConfig
from finesweep.spaces.files import write_json_atomic
from finesweep.trainer.data.chat import resolve_template
from finesweep.trainer.models import TEXT_PAIR_KEY, load_checkpoint, load_model, with_pad_token
from finesweep.trainer.serving.evaluate import (RowScores, evaluate, evaluate_rows, folder_size_bytes, layer_bytes,
                                                model_device, saved_tensors, serving_speed)
from finesweep.trainer.serving.generate import decode_speed, score_generation
from finesweep.trainer.serving.loader import load_exported
from finesweep.trainer.serving.quantize import linear_layer_names, quantize

log = logging.getLogger(__name__)

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
GENERATIONS = "generations.json"
DEPLOY = "deploy.json"


@dataclass
class ExportResult:
    folder: Path
    metrics: dict[str, dict[str, float]]
    """Variant ("full", "int8", "nf4") -> test metrics, plus "size_bytes"."""
    warnings: list[str] = field(default_factory=list)
    """E.g. "int8: accuracy fell by 0.023 (> export.max_metric_drop 0.01)"."""
    adapter: Path | None = None
    """The LoRA adapter alone (weights, config, tokenizer), when the winner was a LoRA trial."""
    generations: Path | None = None
    """generations.json (causal_lm, export.generation_samples > 0): each variant's answers to the test prompts."""
    deploy: dict[str, Any] = field(default_factory=dict)
    """The variant to deploy (search/selection/deploy.py): the fastest (a classifier at batch 1, a causal LM at
    greedy decoding) within export.max_metric_drop."""
    not_made: dict[str, str] = field(default_factory=dict)
    """Variants of export.quantization that could not be made -> why (one line); empty when the export is complete."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """The winner against the baseline trial (search/selection/baseline.compare); empty when the sweep ran none."""
    seconds: dict[str, float] = field(default_factory=dict)
    """The export's steps as the plan predicts them (search/budget/export_time.py::export_steps) -> seconds taken."""

    def variant_folder(self, variant: str) -> Path:
        return self.folder / variant_folder(variant)


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
    log_file: Path | None = None,
    baseline: dict | None = None,
    search_warnings: list[str] | None = None,
    chat_format: str | None = None,
    export: ExportConfig | None = None,
) -> ExportResult:
    """Write out_dir/{model, model-<method>..., [adapter], metrics.json, sweep.json, README.md}; return metrics
    and warnings. A LoRA winner is exported merged (`model`) and also as the adapter alone (`adapter`).

    `baseline` (the baseline trial's best evaluation, as `best`, with sweep.comparison_inputs): its checkpoint, or the
    equal-time run's, scored on the test split as the full model is and compared (selection/baseline.compare);
    `search_warnings` (a winner on the edge of the space) join the export's warnings; `chat_format` (causal_lm) names
    the columns the card says the data came from; `export`: the section as the plan fitted it (None: the file's). A
    variant that cannot be made is left out (`ExportResult.not_made`), its traceback logged for `log_file`.
    `label_names`: for a LoRA checkpoint whose folder and test split name no labels (its base's head is rebuilt)."""
    export = export or config.export
    task = Task(config.data.task)
    cap_torch_threads()  # every variant measured with the cores the plan's estimate counted
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    full_dir = _fresh(out_dir / "model")
    seconds: dict[str, float] = {}
    samples = export.generation_samples if task == Task.causal_lm else 0
    metrics, answers = {}, {}
    label_names = label_names or _split_labels(test_split)
    with _timed(seconds, FULL):
        _save_full(config, Path(checkpoint_dir), Path(tokenizer_source), best, full_dir, label_names)
        adapter = None
        if _is_adapter(Path(checkpoint_dir)):
            adapter = _save_adapter(Path(checkpoint_dir), full_dir, _fresh(out_dir / ADAPTER))
        else:  # a re-export of a full fine-tune keeps no stale adapter
            shutil.rmtree(out_dir / ADAPTER, ignore_errors=True)
        layers = linear_layer_names(full_dir, task)
        metrics[FULL], answers[FULL], full_rows = _measure(full_dir, task, test_split, collate, layers, samples)
    with _timed(seconds, REFERENCES):
        against, untuned_answers = _against_baseline(config, baseline, best, (metrics[FULL], full_rows), test_split,
                                                     collate, label_names, samples, full_dir) if baseline else ({}, [])
    not_made = {}
    for method in quantized_methods(export):
        try:
            with _timed(seconds, method.value):
                folder = quantize(full_dir, method, _fresh(out_dir / f"model-{method.value}"), task)
                metrics[method.value], answers[method.value], _ = _measure(folder, task, test_split, collate,
                                                                           layers, samples)
        except Exception as error:  # noqa: BLE001 - an exporter that cannot trace this architecture, say: the
            # full model and the other variants are still exported, and the card says what is missing and why
            not_made[method.value] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            # The traceback goes to the sweep's log file (INFO: under the console's level unless --verbose).
            log.info("export: %s could not be made", method.value, exc_info=True)
            shutil.rmtree(out_dir / f"model-{method.value}", ignore_errors=True)
    metrics = with_speedups(metrics)
    warnings = [not_made_paragraph(variant, reason, list(metrics), out_dir, log_file)
                for variant, reason in not_made.items()] + drop_warnings(metrics, task, export.max_metric_drop)
    warnings += (search_warnings or []) + majority_class_warnings(metrics[FULL], test_split["labels"], label_names)
    for warning in warnings:
        log.info("export: %s", warning)
    deploy = deploy_choices(metrics, task, export.max_metric_drop)
    # The untuned base model's answers beside the variants' (after them), its scores with theirs in generations.json.
    answered = {**answers, UNTUNED: untuned_answers} if untuned_answers else answers
    scored = {**metrics, UNTUNED: against["untuned_test"]} if untuned_answers else metrics
    examples = side_by_side(answered)
    generations = _write_generations(out_dir / GENERATIONS, scored, examples)
    write_json_atomic(out_dir / "metrics.json", metrics)
    write_json_atomic(out_dir / DEPLOY, deploy)
    write_json_atomic(out_dir / "sweep.json", config.model_dump(mode="json"))
    card = model_card(config, best, metrics, warnings, adapter is not None, examples, deploy, not_made, against,
                      chat_format)
    (out_dir / "README.md").write_text(card, encoding="utf-8")
    return ExportResult(folder=out_dir, metrics=metrics, warnings=warnings, adapter=adapter, generations=generations,
                        deploy=deploy, not_made=not_made, baseline=against, seconds=seconds)


def _against_baseline(config: SweepConfig, baseline: dict, best: dict, winner: tuple[dict[str, float], RowScores],
                      test_split: Any, collate: Callable, label_names: list[str] | None, samples: int,
                      tokenizer_dir: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The baseline's checkpoint (the equal-time run's where it evaluated, else the baseline trial's best) saved as
    the full model is (LoRA merged) and evaluated on the test split by the same code, with greedy answers to the same
    `samples` test prompts (a causal LM); the winner's own numbers where it is the export. `winner`: the full model's
    test metrics and RowScores, the difference's interval paired with the baseline's rows. A causal LM's untuned base model too, its answers decoded by `tokenizer_dir`'s tokenizer (the
    export's). Returns the comparison and the untuned model's answers (none for a classifier)."""
    task = Task(config.data.task)
    winner_metrics, winner_rows = winner
    rows = None
    scored = baseline_comparison.scored_checkpoint(baseline)
    if scored["trial_id"] == best["trial_id"] and int(scored["step"]) == int(best["step"]):
        measured = winner_metrics
    else:
        checkpoint = Path(scored["checkpoint_dir"])
        with tempfile.TemporaryDirectory(prefix="finesweep-baseline-") as scratch:
            _save_full(config, checkpoint, checkpoint, scored, Path(scratch),
                       label_names or _split_labels(test_split))
            model = load_checkpoint(scratch, task, trust_remote_code=config.trust_remote_code)
            measured, baseline_rows = evaluate_rows(model, test_split, collate, task)
            rows = (winner_rows, baseline_rows)
            if samples:
                _generate(model, Path(scratch), test_split, samples, measured)
            del model
            gc.collect()
    untuned, untuned_answers = None, []
    if task == Task.causal_lm:
        untuned, untuned_answers = _untuned_base(config, best, test_split, collate, samples, tokenizer_dir)
    floor = baseline_comparison.majority_share(test_split["labels"]) if task == Task.classification else None
    comparison = baseline_comparison.compare(task, winner_metrics, measured, best, baseline, untuned, rows, config.seed,
                                             floor)
    return comparison, untuned_answers


def _untuned_base(config: SweepConfig, best: dict, test_split: Any, collate: Callable, samples: int,
                  tokenizer_dir: Path) -> tuple[dict[str, float], list[dict[str, str]]]:
    """A causal LM's base model as it was before any training, on the same test split and (`samples`) the same
    prompts: what fine-tuning added. Its scores, and its answers."""
    model = load_model(config.candidate(best["model"]), Task.causal_lm, None, config.trust_remote_code)
    measured = evaluate(model.eval(), test_split, collate, Task.causal_lm)
    answers = _generate(model, tokenizer_dir, test_split, samples, measured) if samples else []
    del model
    gc.collect()
    return measured, answers


@contextmanager
def _timed(seconds: dict[str, float], step: str) -> Iterator[None]:
    """The step's wall seconds into `seconds` (the plan's estimate is compared with them), also when it fails."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[step] = round(time.perf_counter() - started, 1)


def _fresh(folder: Path) -> Path:
    """An empty folder: a re-export must not leave shards of an earlier one beside the new weights."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


# --- the full-precision model -------------------------------------------------------------------------------


def _save_full(config: SweepConfig, checkpoint_dir: Path, tokenizer_source: Path, best: dict, out: Path,
               label_names: list[str] | None) -> None:
    """The winning checkpoint (LoRA adapters merged) saved as safetensors with its tokenizer."""
    task = Task(config.data.task)
    if _is_adapter(checkpoint_dir):
        model = _merged_lora(config, checkpoint_dir, best, label_names or _config_labels(checkpoint_dir))
    else:
        model = load_checkpoint(str(checkpoint_dir), task, trust_remote_code=config.trust_remote_code)
    tokenizer = _tokenizer(tokenizer_source, config.trust_remote_code)
    if task == Task.causal_lm:
        # The export's tokenizer carries the format the model was fine-tuned on: that template, or none for plain
        # text (so `predict`, pipelines and chat front-ends prompt it as it learned).
        tokenizer.chat_template = resolve_template(config.data.chat_template, tokenizer, best.get("model", "best"))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # batched classification needs it in the config
    if config.data.text_pair_column is not None:
        setattr(model.config, TEXT_PAIR_KEY, [config.data.text_column, config.data.text_pair_column])
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

    return with_pad_token(AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code))


# --- measuring ----------------------------------------------------------------------------------------------


def _measure(folder: Path, task: Task, test_split: Any, collate: Callable, layers: list[str],
             samples: int = 0) -> tuple[dict[str, float], list[dict[str, str]], RowScores]:
    """Test metrics, size on disk (whole model and its linear `layers`, which quantization shrinks while the
    embeddings stay as they are), serving speed at batch 1 and 32 of the model saved in `folder`, loaded as a user
    would; with `samples`, also its greedy answers to that many test prompts and their scores (gen_*); and each test
    row's part in the primary metric (RowScores)."""
    import torch

    # Every variant on the GPU where there is one (same device keeps the latencies comparable): torchao's stay on the
    # CPU unless asked, bitsandbytes' go to the GPU by themselves; an ONNX Runtime session runs on the CPU.
    model = load_exported(folder, task, **({"device_map": "cuda"} if torch.cuda.is_available() else {}))
    metrics, rows = evaluate_rows(model, test_split, collate, task)
    metrics.update(_timings(model, task, test_split, collate))
    if torch.cuda.is_available():  # a model tuned on a GPU is often served on CPUs: time every variant there too
        metrics.update(cpu_timings(folder, task, test_split, collate, metrics if model_device(model).type == "cpu" else None))
    metrics["size_bytes"] = float(folder_size_bytes(folder))
    if tensors := saved_tensors(folder):  # an ONNX graph names its transposed weights anew: no per-layer figure
        metrics["linear_layers_bytes"] = float(layer_bytes(tensors, layers))
    examples = _generate(model, folder, test_split, samples, metrics) if samples else []
    del model
    gc.collect()
    return metrics, examples, rows


def _timings(model: Any, task: Task, test_split: Any, collate: Callable) -> dict[str, float]:
    """Serving speed at batch 1 and 32 on the model's device, and a causal LM's greedy decoding (what a chat server
    spends its time on)."""
    timings = serving_speed(model, test_split, collate)
    if task == Task.causal_lm:
        timings.update(decode_speed(model, test_split))
    return timings


def cpu_timings(folder: Path, task: Task, test_split: Any, collate: Callable,
                measured_on_cpu: dict[str, float] | None = None) -> dict[str, float]:
    """The variant's timings on the CPU, named CPU_PREFIX + timing: those of `measured_on_cpu` where the main pass
    already ran there (an ONNX Runtime session), else the folder loaded onto the CPU and timed. A variant that does
    not load onto a CPU (a bitsandbytes build without CPU kernels, say) is logged and left without them."""
    if measured_on_cpu is not None:
        return {CPU_PREFIX + key: measured_on_cpu[key] for key in TIMINGS if key in measured_on_cpu}
    try:
        timings = _timings(load_exported(folder, task, device_map="cpu"), task, test_split, collate)
    except Exception as error:  # noqa: BLE001 - the device's figures stand; the CPU's are an addition
        log.warning("export: %s not timed on the CPU (%s: %s)", folder.name, type(error).__name__, error)
        return {}
    finally:
        gc.collect()
    return {CPU_PREFIX + key: value for key, value in timings.items()}


def _generate(model: Any, folder: Path, test_split: Any, samples: int, metrics: dict[str, float]) -> list[dict[str, str]]:
    """The model's answers to the first `samples` test prompts; their mean scores go into `metrics` as gen_*."""
    scores, examples = score_generation(model, _tokenizer(folder, False), test_split, samples)
    metrics.update({f"gen_{name}": value for name, value in scores.items()})
    return examples


def side_by_side(answers: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    """One row per prompt: prompt, reference and each variant's answer under the variant's name. The variants
    answered the same prompts (the split's first rows), so the rows line up."""
    full = answers.get(FULL) or []
    return [{"prompt": row["prompt"], "reference": row["reference"],
             **{variant: rows[i]["generated"] for variant, rows in answers.items()}} for i, row in enumerate(full)]


def _write_generations(path: Path, metrics: dict[str, dict[str, float]], examples: list[dict[str, str]]) -> Path | None:
    """generations.json: the scores of each variant and the answers side by side; none (and no stale file from an
    earlier export) when nothing was generated."""
    if not examples:
        path.unlink(missing_ok=True)
        return None
    scores = {variant: {key[len("gen_"):]: value for key, value in values.items() if key.startswith("gen_")}
              for variant, values in metrics.items()}
    write_json_atomic(path, {"samples": len(examples), "scores": scores, "examples": examples})
    return path


def drop_warnings(metrics: dict[str, dict[str, float]], task: Task, max_drop: float) -> list[str]:
    """One line per quantized variant whose primary metric is worse than the full model's by more than max_drop.

    Accuracy: absolute drop. Perplexity: relative rise (a perplexity of 40 vs 38 is 5% worse).
    """
    name, higher_is_better = PRIMARY[Task(task)]
    full = metrics[FULL][name]
    warnings = []
    for variant, values in metrics.items():
        loss = metric_loss(full, values[name], higher_is_better)
        if variant == FULL or loss <= max_drop:
            continue
        if higher_is_better:
            warnings.append(f"{variant}: {name} fell by {loss:.3f} (> export.max_metric_drop {max_drop:g})")
        else:
            warnings.append(f"{variant}: {name} rose by {loss:.1%} (> export.max_metric_drop {max_drop:g}, relative)")
    return warnings
