"""The export's time, estimated before the search for the plan's predicted end: per exported variant its making, its
test-split scoring at the probe's evaluation speed, its speed passes (as many as trainer/serving/evaluate.py times at
that speed), and a causal LM's generated answers; the baseline's test pass (and a causal LM's untuned base model's)
once. Only the costs the probe cannot time (loading, saving and registering, by the weights the probe counted; the
ONNX graph's writing) are measured constants (measured.py); benchmarks/README.md compares the plan's predicted end
with the real one. Pure: no model loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from finesweep.search.budget.measured import (
    BATCH1_COST, CPU_TIMING_SECONDS, DECODE_TOKEN_COST, EXPORT_FIXED_SECONDS, EXPORT_PASS_SECONDS,
    EXPORT_SECONDS_PER_GB, EXPORT_THREADS_CAP, GENERATION_ROW_COST, GGUF_DECODE_RATIO, GGUF_MAKE_SECONDS, GGUF_MAKE_SECONDS_PER_GB,
    ONNX_EXPORT_SECONDS, ONNX_EXPORT_SECONDS_PER_GB, UNKNOWN_VARIANT_SLOWDOWN, VARIANT_SLOWDOWN,
)
from finesweep.search.selection.deploy import FULL
from finesweep.spaces import SweepConfig
from finesweep.spaces.config import ExportConfig
from finesweep.trainer.serving.evaluate import SPEED_BATCHES, SPEED_REPEATS, SPEED_ROWS, SPEED_SECONDS, WARM_UP_ROWS
from finesweep.trainer.serving.generate import BATCH_SIZE as GENERATION_BATCH
from finesweep.trainer.serving.generate import DECODE_REPEATS, DECODE_TOKENS

if TYPE_CHECKING:
    from finesweep.search.budget.speed import CombinationTimes

# The export's step that scores the references (search.baseline): the baseline trial's checkpoint and a causal LM's
# untuned base model.
REFERENCES = "baseline"


def export_steps(config: SweepConfig, combinations: list[CombinationTimes], test_rows: int, seq_len: int,
                 timed_on_cpu_too: bool = False, thread_ratio: float = 1.0,
                 export: ExportConfig | None = None) -> dict[str, float]:
    """The export's estimate by step, as search/outputs/export.py times them (FULL, REFERENCES, then each quantized
    variant by name): each variant is made (the ONNX one exported), scores the test split (at the slowest
    candidate's measured fp32 evaluation speed: the export evaluates a plain model, a LoRA winner merged into its
    base; slowed or sped by the variant's kernels), is timed (`timed_on_cpu_too`, a machine with CUDA: there and on
    the CPU) and, for a causal LM, generates its answers (in batches: generation_seconds); the baseline is scored
    (and answers) once beside them.
    `thread_ratio`: the export's threads over a trial's. `export`: the export as it will run (a time limit may
    lighten the file's: export_fit.py); None: the file's."""
    export = (export or config.export).resolved()
    variants = ["none"] + [q.value for q in export.quantization if q.value != "none"]
    eval_speed = _full_precision_speed(combinations) * min(max(thread_ratio, 1.0), EXPORT_THREADS_CAP)
    row_seconds = 1.0 / eval_speed
    task = config.data.task.value
    token_seconds = _decode_seconds(combinations) or DECODE_TOKEN_COST * row_seconds / seq_len
    per_pass, test_pass = pass_seconds(combinations), (test_rows + min(WARM_UP_ROWS, test_rows)) * row_seconds
    answers = min(export.generation_samples, test_rows) if task == "causal_lm" else 0
    answer_seconds = generation_seconds(answers, seq_len // 2, token_seconds)  # a reply: half a row
    steps = {REFERENCES: _reference_passes(config, per_pass + test_pass + answer_seconds)}
    for variant in dict.fromkeys(variants):
        slowdown = VARIANT_SLOWDOWN.get(variant, UNKNOWN_VARIANT_SLOWDOWN)
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
