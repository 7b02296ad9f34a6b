"""The export's time, estimated before the search for the plan's predicted end: per exported variant its making,
its test-split scoring at the probe's evaluation speed, its speed passes, and a causal LM's generated answers.
Fixed costs the probe does not measure are taken from this project's runs (benchmarks/README.md compares the
plan's predicted end with the real one). Pure: no model loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from finesweep.spaces import SweepConfig

if TYPE_CHECKING:
    from finesweep.search.probe.plan import CombinationTimes

EXPORT_FIXED_SECONDS = 15.0  # per exported variant: load, save, model card
# Test-split inference of a quantized variant against full precision: bitsandbytes' kernels are slower (measured
# 1.8x for int8 on CPU, 4.2x int8 and 1.9x nf4 on an H100); torchao's int8 about as fast as full precision on CPU,
# its GPU variants taken as fast as full precision until measured on a GPU. ONNX Runtime's int8 is faster than full
# precision (2 to 4x at batch 1 on the examples).
VARIANT_SLOWDOWN = {"none": 1.0, "int8": 2.0, "nf4": 2.0, "torchao-int8": 1.0, "torchao-int4": 1.0, "torchao-fp8": 1.0,
                    "onnx-int8": 0.5}
# Writing the ONNX graph (torch's exporter; for a causal LM, generate's capture with the key/value cache) and
# quantizing it, by task: measured on the examples on 2 cores (MiniLM 12 s; SmolLM2-135M, 30 layers, 180 s).
ONNX_EXPORT_SECONDS = {"classification": 15.0, "causal_lm": 180.0}
# Each variant's speed passes (batch 1 and 32, up to 8 s of timing each after an untimed pass; a causal LM's greedy
# decoding too), measured on the examples.
SPEED_PASS_SECONDS = {"classification": 15.0, "causal_lm": 40.0}
# One generated token (batch 1, cached keys and values) against one token of a batched forward pass: a decode step
# is latency-bound, so it costs several tokens' worth of a batched forward (7 measured on SmolLM2-135M, CPU).
DECODE_TOKEN_COST = 8.0
# A CPU export scores with every core, the probe timed a trial's cpus_per_trial: speed grows with the ratio (2.05x
# from 1 to 2 threads, the quickstart's MiniLM) up to this many times (small matrices stop feeding more threads).
EXPORT_THREADS_CAP = 4.0


def export_seconds(config: SweepConfig, combinations: list[CombinationTimes], test_rows: int, seq_len: int,
                   timed_on_cpu_too: bool = False, thread_ratio: float = 1.0) -> float:
    """The export's estimate: each variant is made (the ONNX one exported), scores the test split (at the fastest
    measured evaluation speed: the export evaluates a plain model, a LoRA winner merged into its base; slowed or sped
    by the variant's kernels), is timed (`timed_on_cpu_too`, a machine with CUDA: twice, there and on the CPU) and,
    for a causal LM, generates its answers one token at a time. `thread_ratio`: the export's threads over a trial's."""
    variants = ["none"] + [q.value for q in config.export.quantization if q.value != "none"]
    eval_speed = max(c.eval_samples_per_second for c in combinations) * min(max(thread_ratio, 1.0), EXPORT_THREADS_CAP)
    seconds = 0.0
    task = config.data.task.value
    for variant in variants:
        slowdown = VARIANT_SLOWDOWN.get(variant, 2.0)
        seconds += EXPORT_FIXED_SECONDS + SPEED_PASS_SECONDS[task] * (1 + timed_on_cpu_too) + slowdown * test_rows / eval_speed
        if variant == "onnx-int8":
            seconds += ONNX_EXPORT_SECONDS[task]
        if task == "causal_lm":
            answers = min(config.export.generation_samples, test_rows)
            new_tokens = seq_len // 2  # a reply is about half a row
            token_seconds = DECODE_TOKEN_COST / (eval_speed * seq_len)
            seconds += slowdown * answers * new_tokens * token_seconds
    return seconds
