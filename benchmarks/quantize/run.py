"""Quantization of the example's best model: size, test metrics and latency of each variant, side by side.

(a) The best model of `sweeps/tweets.yaml` without a full sweep: the example's data prepared by finesweep's data
pipeline, its recorded best recipe (`search.initial_points[0]`) trained by finesweep's trial code, the best
evaluation kept by the sweep's metric (or `--checkpoint DIR`: a trial checkpoint or an export folder).
(b) The full model saved as the export saves it, then every variant made by finesweep's quantizer and measured the
same way on the test split: finesweep's evaluation (accuracy, macro-F1, loss), bytes on disk (whole model), bytes
of the Linear layers as saved (read from the safetensors header), and per-sample latency at batch 1 and 32.
(c) `benchmarks/quantize/quantize-tweets-<cpu kind>-<date>-<commit>.json` and a Markdown table. Run from the
repository root:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quantize/run.py [--checkpoint DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import logging
import os
import platform
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
FULL = "none"
METHODS = ("int8", "nf4", "onnx-int8")
TORCHAO = "torchao-int8"
# The goals: the quantized Linear layers this many times smaller than in the full model (an ONNX graph renames its
# weights, so it has no per-layer figure), test accuracy falling by at most one point, and (for a variant meant to
# serve faster) at least SPEEDUP_GOAL x full precision's speed at batch 1.
LINEAR_RATIO_GOAL = {"int8": 1.9, "nf4": 3.5, TORCHAO: 1.9}
MAX_ACCURACY_DROP = 0.01
SPEEDUP_GOAL = 1.5
# Trainer files a model does not need: copying them for every better evaluation would cost 180 MB each time.
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_args.bin")
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}


# --- (a) the best model ---------------------------------------------------------------------------------------


def recipe(config: Any, index: int) -> dict[str, Any]:
    """The sweep's initial point `index` completed by the space's fixed values (warmup_ratio, weight_decay, method)."""
    points = config.search.initial_points
    if not 0 <= index < len(points):
        raise SystemExit(f"search.initial_points[{index}]: the sweep file has {len(points)} initial points; pass --point "
                         "with the index of the recipe to train, or --checkpoint DIR of a model already trained")
    point = dict(points[index])
    point.setdefault("method", config.space.method[0].value)
    for name in ("warmup_ratio", "weight_decay"):
        fixed = getattr(config.space, name)
        if name not in point:
            if not isinstance(fixed, float):
                raise SystemExit(f"space.{name} is a range and search.initial_points[{index}] does not set it; "
                                 f"add `{name}: <value>` to that point")
            point[name] = fixed
    missing = {"model", "precision", "effective_batch_size", "learning_rate"} - set(point)
    if missing:
        raise SystemExit(f"search.initial_points[{index}] lacks {sorted(missing)}; the benchmark trains a complete recipe")
    return point


def prepare_data(config: Any, model_name: str, cache: Path) -> tuple[Path, list[str], Any]:
    """The example's splits tokenized for `model_name` exactly as a sweep does it (cached by content)."""
    from finesweep.trainer import data, models
    from finesweep.trainer.models import model_vocab_size

    if config.data.max_seq_len is None:
        raise SystemExit("data.max_seq_len: the benchmark needs it set in the sweep file (tweets.yaml sets 64)")
    candidate = config.candidate(model_name)
    prepared = data.prepare(config.data, config.seed, cache)
    tokenizer = models.load_tokenizer(candidate, config.trust_remote_code)
    tokenized = data.tokenize(prepared, tokenizer, config.data.task, config.data.max_seq_len, cache,
                              too_long=config.data.too_long, model_name=model_name,
                              vocab_size=model_vocab_size(candidate, config.trust_remote_code))
    print(prepared.report.render())
    return tokenized, prepared.label_names, tokenizer


@dataclass
class BestKeeper:
    """A trial sink that keeps a copy of the best evaluation's model, as the sweep keeps the best reported checkpoint.

    The trial keeps only its latest checkpoint (save_total_limit=1); Tune copies each reported one in a sweep.
    Ties go to the earlier step, as in search/selection/best.py.
    """

    metric: str
    mode: str
    keep_dir: Path
    evaluations: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] | None = None

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        if "loss" in metrics:
            print(f"  step {step}: training loss {metrics['loss']:.4f}", flush=True)

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        row = {"step": step, **metrics}
        self.evaluations.append(row)
        print(f"  step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith("eval_")), flush=True)
        value, sign = metrics[self.metric], (1 if self.mode == "min" else -1)
        if self.best is None or sign * value < sign * self.best[self.metric]:
            self.best = row
            shutil.rmtree(self.keep_dir, ignore_errors=True)
            shutil.copytree(checkpoint_dir, self.keep_dir, ignore=shutil.ignore_patterns(*TRAINING_STATE))


def train_best(config: Any, point: dict[str, Any], tokenized: Path, labels: list[str], work: Path,
               threads: int, micro: int) -> tuple[Path, dict[str, Any]]:
    """Train the recipe with finesweep's trial code; returns the best evaluation's model folder and the training log."""
    from finesweep.search.budget.plan import unplanned
    from finesweep.trainer.trial import TrialPlan, plan_batches, train

    plan = TrialPlan(
        candidate=config.candidate(point["model"]).model_dump(), task=config.data.task.value, label_names=labels,
        tokenized_dir=str(tokenized), output_dir=str(work / "trial"), precision=point["precision"],
        method=point["method"], learning_rate=float(point["learning_rate"]), weight_decay=float(point["weight_decay"]),
        warmup_ratio=float(point["warmup_ratio"]), batch=plan_batches(int(point["effective_batch_size"]), micro),
        eval_batch=64, max_steps=config.search.max_steps, eval_every_steps=unplanned(config, 1).eval_every_steps,
        seed=config.seed, threads=threads, trust_remote_code=config.trust_remote_code,
        lora_r=point.get("lora_r"), lora_alpha=point.get("lora_alpha"), lora_dropout=config.space.lora_dropout,
    )
    keeper = BestKeeper(config.search.metric, config.search.mode, work / "best-checkpoint")
    print(f"training {plan.params()}", flush=True)
    started = time.perf_counter()
    train(plan, keeper)
    seconds = time.perf_counter() - started
    shutil.rmtree(work / "trial", ignore_errors=True)  # optimizer state of the last step: 270 MB nobody needs
    info = {"plan": plan.params(), "seconds": seconds, "evaluations": keeper.evaluations, "best": keeper.best,
            "metric": config.search.metric, "mode": config.search.mode}
    return keeper.keep_dir, info


def model_folder(checkpoint: Path) -> Path:
    """A trial checkpoint is the model folder; an export folder holds it in model/."""
    for folder in (checkpoint / "model", checkpoint):
        if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")):
            return folder
    raise SystemExit(f"--checkpoint {checkpoint}: no config.json with *.safetensors there or in its model/ folder; "
                     "pass a trial checkpoint folder or a finesweep export folder")


def checkpoint_record(folder: Path) -> dict[str, Any]:
    """What a given checkpoint says of its training: its step and evaluations (a trial checkpoint's trainer_state.json)."""
    record: dict[str, Any] = {"checkpoint": str(folder)}
    state = folder / "trainer_state.json"
    if state.is_file():
        saved = json.loads(state.read_text(encoding="utf-8"))
        record.update(step=saved.get("global_step"),
                      evaluations=[row for row in saved.get("log_history", []) if "eval_loss" in row])
    return record


def save_full(checkpoint: Path, tokenizer: Any, task: Any, out: Path) -> Path:
    """The full-precision model saved as the export saves it (safetensors, tokenizer, pad token in the config)."""
    from finesweep.trainer.models import load_checkpoint

    shutil.rmtree(out, ignore_errors=True)
    model = load_checkpoint(str(checkpoint), task)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


# --- (b) the variants -----------------------------------------------------------------------------------------


def make_variants(full_dir: Path, work: Path, task: Any) -> tuple[dict[str, Path], dict[str, str]]:
    """Folders of none, int8, nf4, and torchao-int8 where torchao is installed (an optional extra, not installed
    where this was written: its failure is reported, not fatal); and why a variant was left out."""
    folders = {name: make_variant(name, full_dir, work / f"model-{name}", task) for name in (FULL, *METHODS)}
    if importlib.util.find_spec("torchao") is None:
        return folders, {TORCHAO: "torchao is not installed (not a finesweep dependency)"}
    try:
        folders[TORCHAO] = make_variant(TORCHAO, full_dir, work / f"model-{TORCHAO}", task)
    except Exception as error:  # noqa: BLE001 - the three finesweep variants are still worth reporting
        return folders, {TORCHAO: f"{type(error).__name__}: {error}"}
    return folders, {}


def make_variant(name: str, full_dir: Path, out: Path, task: Any) -> Path:
    """The variant's folder: the full one, or what finesweep's quantizer (the export's) saves."""
    from finesweep.spaces import Quantization
    from finesweep.trainer.serving.quantize import quantize

    if name == FULL:
        return full_dir
    shutil.rmtree(out, ignore_errors=True)
    return quantize(full_dir, Quantization(name), out, task)


def layer_tensors(tensors: dict[str, tuple[str, int]], layer: str) -> dict[str, tuple[str, int]]:
    """The layer's own saved tensors: weight, bias and whatever quantization state is saved under its name."""
    return {key: value for key, value in tensors.items() if key.startswith(layer + ".")}


def linear_bytes(folder: Path, full_dir: Path, layers: list[str]) -> dict[str, Any]:
    """Bytes of all Linear layers, and of the quantized ones only, in `folder` and in the full model (same layers).

    A layer counts as quantized when what is saved for it differs from the full model's: other keys (int8's SCB,
    NF4's absmax and quant_state) or a weight that is not a float.
    """
    from finesweep.trainer.serving.evaluate import saved_tensors

    saved, full = saved_tensors(folder), saved_tensors(full_dir)
    if not saved:  # an ONNX graph: its weights are stored transposed under new names
        return {"linear_bytes": None, "linear_layers": len(layers), "quantized_layers": None}
    total = full_total = quantized_bytes = quantized_full = 0
    quantized = []
    for layer in layers:
        mine, theirs = layer_tensors(saved, layer), layer_tensors(full, layer)
        mine_bytes, their_bytes = sum(b for _, b in mine.values()), sum(b for _, b in theirs.values())
        total, full_total = total + mine_bytes, full_total + their_bytes
        weight_dtype = mine.get(layer + ".weight", ("F32", 0))[0]
        if set(mine) != set(theirs) or weight_dtype not in FLOAT_DTYPES:
            quantized.append(layer)
            quantized_bytes, quantized_full = quantized_bytes + mine_bytes, quantized_full + their_bytes
    kept = [layer for layer in layers if layer not in quantized]
    return {"linear_bytes": total, "linear_bytes_full": full_total, "linear_ratio": full_total / total,
            "quantized_layers": len(quantized), "linear_layers": len(layers), "kept_full_precision": kept,
            "quantized_linear_bytes": quantized_bytes, "quantized_linear_bytes_full": quantized_full,
            "quantized_linear_ratio": quantized_full / quantized_bytes if quantized_bytes else None,
            "quantized_linear_bytes_16bit": _as_16bit(full, quantized)}


def _as_16bit(full: dict[str, tuple[str, int]], layers: list[str]) -> int:
    """What the same layers would take saved in bf16/fp16 (half of fp32): the baseline of a 16-bit export."""
    return sum(b // 2 if dtype == "F32" else b for layer in layers for dtype, b in layer_tensors(full, layer).values())


def timing_inputs(rows: Any, collate: Callable, batch: int, batches: int) -> list[dict[str, Any]]:
    """The first batch x batches test rows, collated into `batches` inputs (padded per batch, as in evaluation)."""
    columns = [c for c in ("input_ids", "attention_mask") if c in rows.column_names]
    return [collate([{c: rows[i][c] for c in columns} for i in range(start, start + batch)])
            for start in range(0, batch * batches, batch)]


def timed_pass(model: Any, inputs: list[dict[str, Any]]) -> float:
    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        for item in inputs:
            model(**item)
    return time.perf_counter() - started


def latencies(models: dict[str, Any], rows: Any, collate: Callable, args: argparse.Namespace) -> dict[str, dict]:
    """Per-sample latency of every variant at batch 1 and 32: the same inputs for all, one untimed warm-up pass each
    (NF4 repacks its weights at the first forward on CPU), then `repeats` passes taken round-robin over the variants,
    so that load from other processes on the machine falls on all of them alike; the median pass counts."""
    shapes = {"batch_1": (1, args.batch1_rows), "batch_32": (32, args.batch32_batches)}
    found: dict[str, dict] = {name: {} for name in models}
    for key, (batch, batches) in shapes.items():
        inputs = timing_inputs(rows, collate, batch, batches)
        for model in models.values():
            timed_pass(model, inputs)
        times: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.repeats):
            for name, model in models.items():
                times[name].append(1000 * timed_pass(model, inputs) / (batch * batches))
        for name, runs in times.items():
            found[name][key] = {"ms_per_sample": statistics.median(runs), "ms_per_sample_runs": runs,
                                "samples": batch * batches}
    return found


def measure(folders: dict[str, Path], layers: list[str], test: Any, collate: Callable, task: Any,
            args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every number of every variant, from the folder it was saved to, loaded as a user would load it."""
    from finesweep.trainer.serving.evaluate import evaluate, folder_size_bytes
    from finesweep.trainer.serving.loader import load_exported

    models = {name: load_exported(folder, task).eval() for name, folder in folders.items()}
    # Latency first: the warm-up's first forward is the one that repacks NF4 weights, as in a user's first call.
    timings = latencies(models, test, collate, args)
    results = []
    for name, model in models.items():
        metrics = evaluate(model, test, collate, task, batch_size=32)
        print(f"{name}: accuracy {metrics['accuracy']:.4f}, {_mb(folder_size_bytes(folders[name]))}", flush=True)
        results.append({"variant": name, "folder": _shown(folders[name]), **metrics,
                        "size_bytes": folder_size_bytes(folders[name]),
                        **linear_bytes(folders[name], folders[FULL], layers), "latency": timings[name]})
        results[-1]["test_pass_ms_per_sample"] = results[-1].pop("latency_ms_per_sample")
    del models
    gc.collect()
    return results


def compare(results: list[dict[str, Any]]) -> None:
    """Ratios and changes against the full model, and whether each variant meets the goals."""
    full = results[0]
    for row in results:
        row["size_ratio"] = full["size_bytes"] / row["size_bytes"]
        row["accuracy_change"] = row["accuracy"] - full["accuracy"]
        row["f1_macro_change"] = row["f1_macro"] - full["f1_macro"]
        row["latency_vs_full"] = {k: row["latency"][k]["ms_per_sample"] / full["latency"][k]["ms_per_sample"]
                                  for k in row["latency"]}
        if row["variant"] == FULL:
            continue
        speedup = 1 / row["latency_vs_full"]["batch_1"]
        row["goals"] = {
            "accuracy_drop": {"goal": MAX_ACCURACY_DROP, "value": -row["accuracy_change"],
                              "met": -row["accuracy_change"] <= MAX_ACCURACY_DROP},
            "speedup_batch1": {"goal": SPEEDUP_GOAL, "value": speedup, "met": speedup >= SPEEDUP_GOAL},
        }
        if row["variant"] in LINEAR_RATIO_GOAL:
            ratio, goal = row["quantized_linear_ratio"] or 0.0, LINEAR_RATIO_GOAL[row["variant"]]
            row["goals"]["linear_ratio"] = {"goal": goal, "value": ratio, "met": ratio >= goal}


# --- (c) the report -------------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    header = ["variant", "test accuracy (change)", "macro-F1 (change)", "test loss", "size on disk (ratio)",
              "Linear layers (ratio)", "quantized Linear layers (ratio)", "ms/sample batch 1 (x full)",
              "ms/sample batch 32 (x full)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results:
        quantized = (f"{row['quantized_layers']}/{row['linear_layers']}: {_mb(row['quantized_linear_bytes_full'])} -> "
                     f"{_mb(row['quantized_linear_bytes'])} ({row['quantized_linear_ratio']:.2f}x)"
                     if row["quantized_layers"] else "none" if row["quantized_layers"] == 0 else "n/a (ONNX graph)")
        linear = (f"{_mb(row['linear_bytes'])} ({row['linear_ratio']:.2f}x)" if row["linear_bytes"] is not None
                  else "n/a (ONNX graph)")
        b1, b32 = row["latency"]["batch_1"]["ms_per_sample"], row["latency"]["batch_32"]["ms_per_sample"]
        cells = [row["variant"], f"{row['accuracy']:.4f} ({row['accuracy_change']:+.4f})",
                 f"{row['f1_macro']:.4f} ({row['f1_macro_change']:+.4f})", f"{row['loss']:.4f}",
                 f"{_mb(row['size_bytes'])} ({row['size_ratio']:.2f}x)",
                 linear, quantized,
                 f"{b1:.2f} ({row['latency_vs_full']['batch_1']:.2f}x)", f"{b32:.2f} ({row['latency_vs_full']['batch_32']:.2f}x)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goal_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in results[1:]:
        goals, parts = row["goals"], []
        if ratio := goals.get("linear_ratio"):
            sixteen = row["quantized_linear_bytes_16bit"] / row["quantized_linear_bytes"]
            parts.append(f"quantized Linear layers {ratio['value']:.2f}x smaller than the fp32 full model "
                         f"({sixteen:.2f}x against the same layers in 16 bits; goal {ratio['goal']}x: {_met(ratio)})")
        drop, speed = goals["accuracy_drop"], goals["speedup_batch1"]
        parts.append(f"test accuracy {-drop['value']:+.4f} (goal: a drop of at most {drop['goal']}: {_met(drop)})")
        parts.append(f"{speed['value']:.2f}x full precision's speed at batch 1 (goal for a serving variant: "
                     f"{speed['goal']}x: {_met(speed)})")
        lines.append(f"{row['variant']}: " + "; ".join(parts))
    return lines


def _met(goal: dict[str, Any]) -> str:
    return "met" if goal["met"] else "MISSED"


def _shown(path: Path) -> str:
    """A path as results.json records it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _mb(size: float) -> str:
    return f"{size / 1e6:.2f} MB"


def environment(threads: int) -> dict[str, Any]:
    import bitsandbytes
    import onnxruntime
    import torch
    import transformers

    from finesweep.search.probe.device import cpu_identity

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "bitsandbytes": bitsandbytes.__version__, "onnxruntime": onnxruntime.__version__, "cpu": cpu_identity(),
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "inference_threads": threads, "cuda": torch.cuda.is_available(),
            "torchao": importlib.util.find_spec("torchao") is not None, "date": time.strftime("%Y-%m-%d")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "tweets.yaml")
    parser.add_argument("--point", type=int, default=0, help="index of search.initial_points: the recipe to train")
    parser.add_argument("--checkpoint", type=Path, help="a trained checkpoint or export folder: skip training")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "quantize-benchmark", help="data cache, checkpoints, variants")
    parser.add_argument("--threads", type=int, default=1, help="training threads (1 on a busy machine)")
    parser.add_argument("--micro", type=int, default=32, help="largest micro-batch (the probe's answer in the sweep)")
    parser.add_argument("--infer-threads", type=int, default=1, help="threads of every inference measurement")
    parser.add_argument("--batch1-rows", type=int, default=64, help="test rows timed one at a time per repeat")
    parser.add_argument("--batch32-batches", type=int, default=4, help="batches of 32 test rows timed per repeat")
    parser.add_argument("--repeats", type=int, default=7, help="timed passes per variant and batch size")
    parser.add_argument("--out", type=Path, help="default: quantize-tweets-<cpu kind>-<date>-<commit>.json here")
    args = parser.parse_args()
    run(args)


def quiet_int8_log() -> None:
    """bitsandbytes logs a warning at every int8 matmul on CPU (inputs cast to fp16): 37 lines per forward pass,
    whose writing would also be timed as int8's latency."""
    logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)


def run(args: argparse.Namespace) -> None:
    import torch

    from finesweep.spaces import load
    from finesweep.trainer import data

    quiet_int8_log()
    started = time.perf_counter()
    config = load(args.sweep)
    point = recipe(config, args.point)
    task, work = config.data.task, args.work.resolve()
    tokenized, labels, tokenizer = prepare_data(config, point["model"], work / "cache")
    checkpoint = model_folder(args.checkpoint) if args.checkpoint else None
    training = checkpoint_record(checkpoint) if checkpoint else {}
    if checkpoint is None:
        checkpoint, training = train_best(config, point, tokenized, labels, work, args.threads, args.micro)
    if checkpoint.resolve() == (work / "model").resolve():
        raise SystemExit(f"--checkpoint {args.checkpoint}: that is the benchmark's own output folder {work / 'model'}, "
                         "which it rewrites; pass runs/quantize-benchmark/best-checkpoint, or another --work")
    full_dir = save_full(checkpoint, tokenizer, task, work / "model")
    test = data.load_tokenized(tokenized)["test"]
    collate = data.collator(tokenizer, task)
    from finesweep.trainer.serving.quantize import linear_layer_names

    layers = linear_layer_names(full_dir, task)
    torch.set_num_threads(args.infer_threads)  # the same threads for every variant's measurements
    folders, skipped = make_variants(full_dir, work, task)
    load_before = os.getloadavg()
    results = measure(folders, layers, test, collate, task, args)
    compare(results)
    report = {"sweep": _shown(args.sweep), "recipe": point, "test_rows": len(test), "environment": environment(args.infer_threads),
              "training": training, "load_average_1_5_15min": {"before": load_before, "after": os.getloadavg()},
              "variants": results, "skipped": skipped, "goals": goal_lines(results),
              "seconds": time.perf_counter() - started}
    recorded = naming.facts()
    report = {**recorded, **report}
    args.out = args.out or naming.result_path(Path(__file__).parent, "quantize", "tweets", recorded)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(results))
    print("\n".join(report["goals"] + [f"{name} left out: {why}" for name, why in skipped.items()]))
    print(f"whole run {report['seconds']:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
