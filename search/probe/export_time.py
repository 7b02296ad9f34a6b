"""The export's time, estimated before the search for the plan's predicted end: per exported variant its making, its
test-split scoring at the probe's evaluation speed, its speed passes (as many as trainer/serving/evaluate.py times at
that speed), and a causal LM's generated answers; the baseline's test pass (and a causal LM's untuned base model's)
once. Only the costs the probe cannot time (loading, saving and registering, by the weights the probe counted; the
ONNX graph's writing) are taken from this project's runs; benchmarks/README.md compares the plan's predicted end
with the real one. Pure: no model loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from finesweep.search.selection.deploy import FULL
from finesweep.spaces import SweepConfig
from finesweep.trainer.serving.evaluate import SPEED_BATCHES, SPEED_REPEATS, SPEED_ROWS, SPEED_SECONDS, WARM_UP_ROWS
from finesweep.trainer.serving.generate import BATCH_SIZE as GENERATION_BATCH
from finesweep.trainer.serving.generate import DECODE_REPEATS, DECODE_TOKENS

if TYPE_CHECKING:
    from finesweep.search.probe.plan import CombinationTimes

# The export's step that scores the references (search.baseline): the baseline trial's checkpoint and a causal LM's
# untuned base model.
REFERENCES = "baseline"
# Per exported variant (and per reference pass: the baseline's checkpoint, a causal LM's base model): loading and
# saving it, the model card and the registry's entry. Measured on 2 cores (AVX-512, the files in the page cache):
# 3.9 s for MiniLM's 91 MB of float32 weights, 4.4 s for SmolLM2-135M's 538 MB. The part that grows with the weights
# (as the probe counted them) is what a model of gigabytes adds, read and written at about 0.7 GB/s: not yet measured
# on one. EXPORT_FIXED_SECONDS where the probe's answer has no count (an older machine cache).
EXPORT_FIXED_SECONDS = 4.0
EXPORT_PASS_SECONDS = 3.8
EXPORT_SECONDS_PER_GB = 1.5
# Test-split inference of a quantized variant against full precision: bitsandbytes' kernels are slower (measured
# 1.8x for int8 on CPU, 4.2x int8 and 1.9x nf4 on an H100); torchao's int8 about as fast as full precision on CPU,
# its GPU variants taken as fast as full precision until measured on a GPU. ONNX Runtime's int8 scores the test
# split in 0.69x full precision's time (MiniLM, batch 32, 2 cores, AVX-512); llama.cpp's GGUF files, one row at a
# time, in 1.42-1.47x (the LLM example's SmolLM2-135M, 2 cores, AVX-512, 2026-11-26).
VARIANT_SLOWDOWN = {"none": 1.0, "int8": 2.0, "nf4": 2.0, "torchao-int8": 1.0, "torchao-int4": 1.0, "torchao-fp8": 1.0,
                    "onnx-int8": 0.7, "gguf-q8_0": 1.5, "gguf-q4_k_m": 1.5}
# Writing the ONNX graph (torch's exporter; for a causal LM, generate's capture with the key/value cache) and
# quantizing it, by task, on 2 cores: MiniLM (0.09 GB of float32 weights) 6 s (AVX-512) to 12 s (AVX2); SmolLM2-135M
# (0.54 GB, 30 layers) 180 s as a causal LM (AVX2), about 67 s as a classifier (AVX-512: its step took 92.6 s where
# a flat 8 s had it at 33.8). By the weights the probe counted, at least the flat seconds (none counted: the flat).
ONNX_EXPORT_SECONDS = {"classification": 8.0, "causal_lm": 180.0}
ONNX_EXPORT_SECONDS_PER_GB = {"classification": 125.0, "causal_lm": 335.0}
# Making a GGUF file: llama.cpp's converter (a Python process of its own that loads torch and reads the weights) and,
# for a k-quant, its f16 file quantized again; fixed seconds (the converter's start: torch imported) plus seconds
# per GB of float32 weights. SmolLM2-135M (0.54 GB) on 2 cores, AVX-512: 7.8 s for q8_0, 7.8 s for q4_k_m.
GGUF_MAKE_SECONDS = 4.0
GGUF_MAKE_SECONDS_PER_GB = 7.0
# llama.cpp answers one prompt at a time (trainer/serving/gguf_runtime.py): its answers are priced row by row, each
# token at this share of full precision's measured decoding (SmolLM2-135M on 2 cores: 13.1 ms for q8_0 and 11.9 for
# q4_k_m against 43.8, 0.27-0.30).
GGUF_DECODE_RATIO = 0.3
# A row at batch 1 (latency-bound) against a row of a batched pass: 1.26 measured on MiniLM, full precision.
BATCH1_COST = 1.5
# One generated token (batch 1, cached keys and values) against one token of a batched forward pass, where the probe
# did not time decoding (an older machine cache): a decode step is latency-bound, several tokens' worth of a batched
# forward (7 measured on SmolLM2-135M on one CPU; 37 on another, so the probe now times it).
DECODE_TOKEN_COST = 8.0
# A decode step of a batch of answers against one of a single row (the export generates GENERATION_BATCH answers at
# once): the weights are read once a step and each more row adds its compute. SmolLM2-135M on 2 cores: 33 ms a step
# at 1 row, 56 at 4, 104 at 16; priced one answer at a time, the LLM example's export was predicted at 168 s, took 105.
GENERATION_ROW_COST = 0.15
# The speed passes of a variant timed on a CPU the probe never measured (a GPU machine times every variant on its
# CPU too): each of its shapes at most SPEED_SECONDS of timing after an untimed pass, taken as that bound.
CPU_TIMING_SECONDS = 3 * SPEED_SECONDS
# A CPU export scores with every core, the probe timed a trial's cpus_per_trial: speed grows with the ratio (2.05x
# from 1 to 2 threads, the quickstart's MiniLM) up to this many times (small matrices stop feeding more threads).
EXPORT_THREADS_CAP = 4.0


def export_seconds(config: SweepConfig, combinations: list[CombinationTimes], test_rows: int, seq_len: int,
                   timed_on_cpu_too: bool = False, thread_ratio: float = 1.0) -> float:
    """The export's estimate: the sum of export_steps'."""
    return sum(export_steps(config, combinations, test_rows, seq_len, timed_on_cpu_too, thread_ratio).values())


def export_steps(config: SweepConfig, combinations: list[CombinationTimes], test_rows: int, seq_len: int,
                 timed_on_cpu_too: bool = False, thread_ratio: float = 1.0) -> dict[str, float]:
    """The export's estimate by step, as search/outputs/export.py times them (FULL, REFERENCES, then each quantized
    variant by name): each variant is made (the ONNX one exported), scores the test split (at the slowest
    candidate's measured fp32 evaluation speed: the export evaluates a plain model, a LoRA winner merged into its
    base; slowed or sped by the variant's kernels), is timed (`timed_on_cpu_too`, a machine with CUDA: there and on
    the CPU) and, for a causal LM, generates its answers (in batches: generation_seconds); the baseline is scored
    (and answers) once beside them.
    `thread_ratio`: the export's threads over a trial's."""
    variants = ["none"] + [q.value for q in config.export.quantization if q.value != "none"]
    eval_speed = _full_precision_speed(combinations) * min(max(thread_ratio, 1.0), EXPORT_THREADS_CAP)
    row_seconds = 1.0 / eval_speed
    task = config.data.task.value
    token_seconds = _decode_seconds(combinations) or DECODE_TOKEN_COST * row_seconds / seq_len
    per_pass, test_pass = pass_seconds(combinations), (test_rows + min(WARM_UP_ROWS, test_rows)) * row_seconds
    answers = min(config.export.generation_samples, test_rows) if task == "causal_lm" else 0
    answer_seconds = generation_seconds(answers, seq_len // 2, token_seconds)  # a reply: half a row
    steps = {REFERENCES: _reference_passes(config, per_pass + test_pass + answer_seconds)}
    for variant in dict.fromkeys(variants):
        slowdown = VARIANT_SLOWDOWN.get(variant, 2.0)
        seconds = per_pass + slowdown * (test_pass + speed_pass_seconds(row_seconds, seq_len, task, token_seconds))
        seconds += CPU_TIMING_SECONDS * timed_on_cpu_too
        if variant == "onnx-int8":
            seconds += max(ONNX_EXPORT_SECONDS[task], ONNX_EXPORT_SECONDS_PER_GB[task] * _weight_gb(combinations))
        if variant.startswith("gguf-"):
            seconds += GGUF_MAKE_SECONDS + GGUF_MAKE_SECONDS_PER_GB * _weight_gb(combinations)
            seconds += answers * (seq_len // 2) * token_seconds * GGUF_DECODE_RATIO  # one answer at a time
        elif answers:
            seconds += slowdown * answer_seconds
        steps[FULL if variant == "none" else variant] = seconds
    return steps


def _weight_gb(combinations: list[CombinationTimes]) -> float:
    """The largest candidate's float32 weights in GB, as the probe counted them (0 where it counted none)."""
    return max((c.weight_bytes for c in combinations), default=0) / 1e9


def generation_seconds(answers: int, new_tokens: int, token_seconds: float) -> float:
    """Greedy answers generated GENERATION_BATCH at a time (trainer/serving/generate.py), `new_tokens` steps a
    batch, a step of b rows costing a single row's `token_seconds` x (1 + GENERATION_ROW_COST x (b - 1))."""
    full, rest = divmod(answers, GENERATION_BATCH)
    rows = [GENERATION_BATCH] * full + ([rest] if rest else [])
    return sum(new_tokens * token_seconds * (1 + GENERATION_ROW_COST * (b - 1)) for b in rows)


def _full_precision_speed(combinations: list[CombinationTimes]) -> float:
    """The slowest candidate's measured evaluation in fp32, the precision the export saves and scores the model in
    (bf16's is 1.5x faster on an AVX-512 bf16 CPU): the winner may be any candidate, and a time limit is a bound (a
    3-layer candidate's speed made the estimate 35 s where the 6-layer winner's export took 64). Per candidate the
    fastest of its precisions where fp32 was not measured."""
    return min(max(c.eval_samples_per_second for c in kept) for kept in _by_model_in_fp32(combinations))


def _by_model_in_fp32(combinations: list[CombinationTimes]) -> list[list[CombinationTimes]]:
    """Per candidate model its fp32 combinations (all of them where fp32 was not measured)."""
    by_model: dict[str, list[CombinationTimes]] = {}
    for times in combinations:
        by_model.setdefault(times.key.split("|")[0], []).append(times)
    return [[c for c in kept if c.key.split("|")[1:2] == ["fp32"]] or kept for kept in by_model.values()]


def speed_pass_seconds(row_seconds: float, seq_len: int, task: str, token_seconds: float | None = None) -> float:
    """trainer/serving/evaluate.py's serving speed (SPEED_ROWS rows at batch 1, SPEED_BATCHES batches of 32) and a
    causal LM's decoding speed (DECODE_TOKENS tokens at `token_seconds` each, the probe's measure, else
    DECODE_TOKEN_COST's), each run once untimed and then until its timing budget is spent."""
    seconds = (_timed(SPEED_ROWS * BATCH1_COST * row_seconds, SPEED_REPEATS)
               + _timed(SPEED_BATCHES * 32 * row_seconds, SPEED_REPEATS))
    if task == "causal_lm":
        token_seconds = token_seconds or DECODE_TOKEN_COST * row_seconds / seq_len
        seconds += _timed(DECODE_TOKENS * token_seconds, DECODE_REPEATS)
    return seconds


def _timed(one_pass: float, repeats: int) -> float:
    """evaluate.median_seconds' cost: an untimed pass, then timed ones until `repeats` or SPEED_SECONDS of them."""
    timed = min(repeats, max(1, -(-SPEED_SECONDS // one_pass))) if one_pass > 0 else 0
    return one_pass * (1 + timed)


def _decode_seconds(combinations: list[CombinationTimes]) -> float:
    """The slowest candidate's measured greedy decoding per token, as _full_precision_speed picks its evaluation
    speed (fp32's where measured: the export decodes the full-precision model); 0.0 where none was measured."""
    return max((max(c.decode_seconds_per_token for c in kept) for kept in _by_model_in_fp32(combinations)),
               default=0.0)


def pass_seconds(combinations: list[CombinationTimes]) -> float:
    """One variant's or reference's loading, saving and registering, for the largest candidate (the winner may be
    any); the flat EXPORT_FIXED_SECONDS where the probe counted no weights."""
    weight_gb = _weight_gb(combinations)
    return EXPORT_PASS_SECONDS + EXPORT_SECONDS_PER_GB * weight_gb if weight_gb else EXPORT_FIXED_SECONDS


def _reference_passes(config: SweepConfig, one_pass: float) -> float:
    """The baseline trial's checkpoint scored on the test split (search.baseline; a grid search runs none), and a
    causal LM's untuned base model too, each answering the same prompts: full-precision passes beside the variants'."""
    if config.search.baseline == "off" or config.search.algorithm == "grid":
        return 0.0
    passes = 2 if config.data.task.value == "causal_lm" else 1
    return passes * one_pass
