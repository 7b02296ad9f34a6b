"""Would torch.compile buy the trials more steps? One training step of all-MiniLM-L6-v2 (the [CLS] head, AdamW,
batches of 8 or 16 rows at 32 to 56 tokens, as length-grouped tweets come), eager against `torch.compile(model,
dynamic=True)` (inductor, what `TrainingArguments(torch_compile=True)` asks for), fp32 and bf16 autocast, at one
thread (a trial) and every core (the winner's continuation). Each variant runs in its own process with an empty
inductor cache, as a trial's first compile on a machine does: the warm-up is the first four steps (the compile
included), the step time the median over the next 24. Prints one row per variant and the break-even: the steps
after which the compile's cost is paid back.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/compile_step.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import MODEL

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

LENGTHS = [32, 40, 48, 40, 32, 56, 40, 48]  # tokens per batch: the spread of length-grouped tweet batches
WARM_STEPS = 4
TIMED_STEPS = 24


def one_variant(mode: str, precision: str, batch: int, threads: int) -> dict:
    """Runs in the child process: the timings of one variant."""
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(MODEL, num_labels=3)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    forward = torch.compile(model, dynamic=True) if mode == "compile" else model

    def step(length: int) -> float:
        started = time.perf_counter()
        ids = torch.randint(1000, 20000, (batch, length))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(input_ids=ids, attention_mask=torch.ones_like(ids),
                           labels=torch.randint(0, 3, (batch,))).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - started

    warm_up = sum(step(LENGTHS[i % len(LENGTHS)]) for i in range(WARM_STEPS))
    seconds = statistics.median(step(LENGTHS[i % len(LENGTHS)]) for i in range(TIMED_STEPS))
    return {"mode": mode, "precision": precision, "batch": batch, "threads": threads,
            "warm_up_s": round(warm_up, 1), "s_per_step": round(seconds, 4)}


def run_child(mode: str, precision: str, batch: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, __file__, "--child", mode, precision, str(batch), str(threads)],
                             env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(rows: list[dict]) -> None:
    print("| batch | threads | precision | eager s/step | compiled s/step | compiled speed | compile warm-up s | "
          "break-even steps |")
    print("|---|---|---|---|---|---|---|---|")
    eager = {(r["batch"], r["threads"], r["precision"]): r for r in rows if r["mode"] == "eager"}
    for row in (r for r in rows if r["mode"] == "compile"):
        base = eager[(row["batch"], row["threads"], row["precision"])]
        saved = base["s_per_step"] - row["s_per_step"]
        extra = row["warm_up_s"] - base["warm_up_s"]
        break_even = f"{extra / saved:,.0f}" if saved > 0 else "never"
        print(f"| {row['batch']} | {row['threads']} | {row['precision']} | {base['s_per_step']:.3f} | "
              f"{row['s_per_step']:.3f} | {base['s_per_step'] / row['s_per_step']:.2f}x | {row['warm_up_s']:.0f} | "
              f"{break_even} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, precision, batch, threads = args.child
        print(json.dumps(one_variant(mode, precision, int(batch), int(threads))))
        return
    rows = []
    for batch in args.batches:
        for threads in sorted(set(args.threads)):
            for precision in ("fp32", "bf16"):
                for mode in ("eager", "compile"):
                    rows.append(run_child(mode, precision, batch, threads))
                    print(json.dumps(rows[-1]), flush=True)
    report(rows)
    recorded = naming.facts()
    out = naming.result_path(Path(__file__).parent, "compile-step", "minilm-l6", recorded)
    out.write_text(json.dumps({"benchmark": "compile-step", "command": "python benchmarks/versus-defaults/compile_step.py",
                               **recorded, "rows": rows}, indent=1) + "\n")
    print(f"result: {out}")


if __name__ == "__main__":
    main()
