"""Quantization of the LLM example's model for serving on a CPU: perplexity, size and speed of each variant, side by
side in one run, and the ONNX Runtime alternatives finesweep's onnx-int8 was chosen among.

(a) The model: SmolLM2-135M-Instruct from the GGUF file of `sweeps/smollm2-chat.yaml`, dequantized as a sweep does
it (or `--checkpoint DIR`, e.g. a sweep's `export/model`); the test split of the example's conversations, rendered
and tokenized as a sweep does it.
(b) Variants: full precision (PyTorch), bitsandbytes int8, and from one float ONNX graph (transformers' exporter,
key/value cache inside): onnx-fp32 (no quantization: what ONNX Runtime alone gives), **onnx-int8** (finesweep's
export: int8 weight blocks, MatMulNBits), onnx-int4 (4-bit blocks), onnx-dynamic-int8 (`quantize_dynamic`, one scale
per activation tensor: the classifier's method); with the gguf extra, gguf-q8_0 and gguf-q4_k_m (llama.cpp's files,
run in llama.cpp: the decode speed a CPU user compares with).
(c) Each measured by finesweep's own code, as the export does: perplexity on the test split, bytes on disk, greedy
decoding at batch 1 (ms per generated token, 32 tokens), forward pass at batch 1 and 32 (ms per sample). Written to
`benchmarks/quantize/quantize-llm-chat-<cpu kind>-<date>-<commit>.json` and printed as a Markdown table. From the
repository root:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quantize/llm.py [--checkpoint DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import gc
import json
import os
import time
from pathlib import Path
from typing import Any

from run import REPO, environment, quiet_int8_log

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

# The goal on this kind of machine: at least this speed-up at batch 1 with at most 1% perplexity lost.
SPEEDUP_GOAL = 1.5
MAX_PERPLEXITY_RISE = 0.01


def prepare(sweep: Path, work: Path) -> tuple[Path, Any, Any]:
    """(full model folder, test split, collate), as a sweep prepares them."""
    from finesweep.search.inputs import SweepFolder, dequantize_gguf, prepare_data
    from finesweep.search.outputs.console import Console
    from finesweep.spaces import load
    from finesweep.trainer import data, models

    config = load(sweep)
    folder, console = SweepFolder(work), Console()
    config = dequantize_gguf(config, console)
    name = config.model_names[0]
    prepared = prepare_data(config, folder, console)
    tokenizer = models.load_tokenizer(config.candidate(name), config.trust_remote_code)
    test = data.load_tokenized(Path(prepared.tokenized[name]))["test"]
    return Path(config.candidate(name).path), test, data.collator(tokenizer, config.data.task)


def make_variants(full_dir: Path, work: Path) -> dict[str, Path]:
    """Every variant's folder; the float graph is exported once and quantized each way."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from finesweep.spaces import Quantization, Task
    from finesweep.trainer.models import copy_tokenizer
    from finesweep.trainer.serving.onnx_decoder import export_float, quantized_folder
    from finesweep.trainer.serving.onnx_runtime import ONNX_FILE
    from finesweep.trainer.serving.quantize import quantize

    folders = {"full": full_dir, "int8": quantize(full_dir, Quantization.int8, work / "int8", Task.causal_lm)}
    float_dir = work / "onnx-fp32"
    started = time.perf_counter()
    export_float(full_dir, float_dir)
    print(f"float ONNX export: {time.perf_counter() - started:.0f} s")
    copy_tokenizer(full_dir, float_dir)
    folders["onnx-fp32"] = float_dir
    folders["onnx-int8"] = quantized_folder(float_dir, work / "onnx-int8", full_dir)
    folders["onnx-int4"] = quantized_folder(float_dir, work / "onnx-int4", full_dir, bits=4)
    dynamic = work / "onnx-dynamic-int8"
    shutil.copytree(float_dir, dynamic, dirs_exist_ok=True, ignore=shutil.ignore_patterns(f"{ONNX_FILE}*"))
    quantize_dynamic(float_dir / ONNX_FILE, dynamic / ONNX_FILE, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], use_external_data_format=True)
    folders["onnx-dynamic-int8"] = dynamic
    folders.update(gguf_variants(full_dir, work))
    return folders


def gguf_variants(full_dir: Path, work: Path) -> dict[str, Path]:
    """finesweep's GGUF files (llama.cpp's converter and quantizer), run in llama.cpp: the anchor for decode speed a
    CPU user knows. Left out, with a line saying so, where the gguf extra is not installed."""
    from finesweep.spaces import Quantization, Task
    from finesweep.trainer.serving.gguf_export import missing_tools
    from finesweep.trainer.serving.quantize import quantize

    if (missing := missing_tools()) is not None:
        print(f"GGUF variants left out: {missing}")
        return {}
    folders = {}
    for method in (Quantization.gguf_q8_0, Quantization.gguf_q4_k_m):
        started = time.perf_counter()
        folders[method.value] = quantize(full_dir, method, work / method.value, Task.causal_lm)
        print(f"{method.value}: made in {time.perf_counter() - started:.1f} s")
    return folders


def measure(name: str, folder: Path, test: Any, collate: Any) -> dict[str, Any]:
    from finesweep.spaces import Task
    from finesweep.trainer.serving.evaluate import evaluate, folder_size_bytes, serving_speed
    from finesweep.trainer.serving.generate import decode_speed
    from finesweep.trainer.serving.loader import load_exported

    model = load_exported(folder, Task.causal_lm)
    row = {"variant": name, **evaluate(model, test, collate, Task.causal_lm), **serving_speed(model, test, collate),
           **decode_speed(model, test), "size_bytes": folder_size_bytes(folder)}
    del model
    gc.collect()
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return row


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its speed-ups over full precision (the export's own `with_speedups`), its perplexity change
    and how many times smaller it is."""
    from finesweep.search.selection.deploy import with_speedups

    full = rows[0]
    timed = with_speedups({row["variant"]: row for row in rows})
    return [{"speedup_decode": 1.0, "speedup_batch1": 1.0, "speedup_batch32": 1.0, **values,
             "perplexity_change": values["perplexity"] / full["perplexity"] - 1,
             "size_ratio": full["size_bytes"] / values["size_bytes"]} for values in timed.values()]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | perplexity (change) | size MB (x smaller) | decode ms/token (speed-up) | "
             "forward batch 1 ms (speed-up) | batch 32 ms/sample (speed-up) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['perplexity']:.3f} ({r['perplexity_change']:+.1%}) | "
                     f"{r['size_bytes'] / 1e6:.0f} ({r['size_ratio']:.2f}x) | "
                     f"{r['ms_per_generated_token']:.1f} ({r['speedup_decode']:.2f}x) | "
                     f"{r['latency_ms_batch1']:.1f} ({r['speedup_batch1']:.2f}x) | "
                     f"{r['ms_per_sample_batch32']:.1f} ({r['speedup_batch32']:.2f}x) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "smollm2-chat.yaml")
    parser.add_argument("--checkpoint", type=Path, help="a causal LM folder to measure instead of the example's model")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "quantize-benchmark-llm")
    parser.add_argument("--threads", type=int, default=1, help="threads of every measurement")
    parser.add_argument("--out", type=Path, help="default: quantize-llm-chat-<cpu kind>-<date>-<commit>.json here")
    args = parser.parse_args()

    import torch

    quiet_int8_log()
    started = time.perf_counter()
    work = args.work.resolve()
    full_dir, test, collate = prepare(args.sweep, work)
    full_dir = args.checkpoint.resolve() if args.checkpoint else full_dir
    torch.set_num_threads(args.threads)  # the same threads for every variant (ONNX Runtime takes torch's count)
    folders = make_variants(full_dir, work)
    load_before = os.getloadavg()
    rows = compare([measure(name, folder, test, collate) for name, folder in folders.items()])
    ours = next(r for r in rows if r["variant"] == "onnx-int8")
    goal = (f"onnx-int8: decode {ours['speedup_decode']:.2f}x full precision (goal >= {SPEEDUP_GOAL}x), perplexity "
            f"{ours['perplexity_change']:+.2%} (goal <= {MAX_PERPLEXITY_RISE:+.0%})")
    report = {"sweep": str(args.sweep.resolve().relative_to(REPO)), "model": str(full_dir), "test_rows": len(test),
              "environment": environment(args.threads),
              "load_average_1_5_15min": {"before": load_before, "after": os.getloadavg()}, "variants": rows,
              "goal": goal, "seconds": time.perf_counter() - started}
    recorded = naming.facts()
    report = {**recorded, **report}
    args.out = args.out or naming.result_path(Path(__file__).parent, "quantize-llm", "chat", recorded)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(rows))
    print(goal)
    print(f"whole run {report['seconds']:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
