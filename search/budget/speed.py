"""What a step and an evaluation cost, per combination of model, precision and method: the probe's speeds scaled to
the trials' batches. The probe times rows of the full sequence length (the memory worst case); a trial pads each
batch to its longest row only, so its speed follows the data's token lengths and how its batches are drawn. Random
batches pad near the 1 - 1/(batch + 1) quantile of the lengths; batches grouped by length (transformers'
LengthGroupedSampler) are cut from a shuffled megabatch sorted by length, the j-th padded to the row at rank
j x batch from the top. An evaluation takes the whole validation split sorted by length (one megabatch). Pure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from finesweep.search.budget.measured import FORWARD_SPEEDUP, SMALL_MODEL_LOAD_SECONDS, TRIAL_START_SECONDS
from finesweep.search.probe.table import ProbeResult, attempt_speed

# The percentile keys of trainer/data/lengths.percentiles (a test keeps the two in step), with their quantiles. An
# older report carries only p50 and up: a quantile below the lowest present takes its value.
ANCHORS = (("min", 0.0), ("p10", 0.10), ("p25", 0.25), ("p50", 0.50), ("p75", 0.75), ("p90", 0.90),
           ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
# LengthGroupedSampler's megabatch: this many batches at most, and no more than a quarter of the rows' batches.
MEGABATCH_BATCHES = 50


@dataclass(frozen=True)
class CombinationTimes:
    """What one model, precision and method costs per step and per evaluation, as the probe measured it."""

    key: str
    samples_per_second: float  # training, at the micro-batch the trials use
    eval_samples_per_second: float
    seconds_per_step: float  # one optimizer step at the space's mean effective batch
    seconds_per_evaluation: float  # one pass over the validation split
    decode_seconds_per_token: float = 0.0  # a causal LM's greedy decoding at batch 1
    weight_bytes: int = 0  # the model's float32 weights (0: an older cache's answer)
    start_seconds: float = TRIAL_START_SECONDS  # from a trial's launch to its first step

    def period_seconds(self, eval_every_steps: int) -> float:
        """One evaluation period: the steps between two evaluations and the evaluation."""
        return eval_every_steps * self.seconds_per_step + self.seconds_per_evaluation

    @property
    def mean_batch(self) -> float:
        """The space's mean effective batch, in which seconds_per_step is counted."""
        return self.samples_per_second * self.seconds_per_step


def combination_times(probes: dict[str, ProbeResult], effective_batches: list[int], validation_rows: int,
                      lengths: dict[str, dict[str, float]] | None = None, train_rows: int = 0,
                      grouped: bool = False) -> list[CombinationTimes]:
    """Per combination the probe could train, its cost per step (at the space's mean effective batch: the sampler
    spreads the trials over the listed sizes) and per evaluation. With the data's token `lengths` (percentiles per
    model) the full-length speeds are scaled to padded batches: random ones, or `grouped` by length."""
    mean_batch = statistics.fmean(effective_batches)
    times = []
    for key, result in sorted(probes.items()):
        speed = result.samples_per_second
        if speed <= 0 or result.too_slow:
            continue
        eval_speed = _eval_samples_per_second(result) or FORWARD_SPEEDUP * speed
        if lengths and result.model in lengths:
            step_rows = max(result.micro_batch, round(mean_batch))
            eval_batch = result.eval_batch_size or result.micro_batch  # what a trial evaluates with
            train_sorted = length_grouped_megabatch(train_rows, step_rows) if grouped and train_rows else None
            speed /= padded_fraction(lengths[result.model], result.micro_batch, result.seq_len, train_sorted)
            # A trial evaluates the validation split sorted by length (trainer/trial.py::by_length).
            eval_speed /= padded_fraction(lengths[result.model], eval_batch, result.seq_len, validation_rows or None)
        start = TRIAL_START_SECONDS + max(result.load_seconds - SMALL_MODEL_LOAD_SECONDS, 0.0)
        times.append(CombinationTimes(key, speed, eval_speed, mean_batch / speed, validation_rows / eval_speed,
                                      result.decode_seconds_per_token, result.weight_bytes, start))
    return times


def _eval_samples_per_second(result: ProbeResult) -> float:
    return max((attempt_speed(a) for a in result.attempts if a.get("mode") == "eval" and not a.get("error")),
               default=0.0)


def length_grouped_megabatch(rows: int, batch: int) -> int:
    """Rows LengthGroupedSampler sorts together when it draws batches of `batch` (an optimizer step's rows on one
    device: micro-batch x accumulation) from `rows`."""
    batch = max(batch, 1)
    return max(1, min(rows // (batch * 4), MEGABATCH_BATCHES)) * batch


def padded_fraction(percentiles: dict[str, float], batch: int, seq_len: int, sorted_rows: int | None = None) -> float:
    """The expected length of a `batch` padded to its longest row, as a fraction of seq_len (longer rows truncated).
    `sorted_rows`: the megabatch the batches are cut from after sorting it by length (None: random batches)."""
    batch = max(batch, 1)
    megabatch = max(sorted_rows or batch, batch)
    batches = megabatch // batch
    quantiles = [1 - 1 / (megabatch + 1)] + [1 - j / batches for j in range(1, batches)]
    lengths = (min(max(quantile_length(percentiles, q), 1.0), seq_len) for q in quantiles)
    return statistics.fmean(lengths) / seq_len


def quantile_length(percentiles: dict[str, float], quantile: float) -> float:
    """The token length at `quantile`, interpolated between the percentiles present."""
    anchors = [(q, percentiles[key]) for key, q in ANCHORS if key in percentiles]
    if quantile <= anchors[0][0]:
        return anchors[0][1]
    for (low_q, low), (high_q, high) in zip(anchors, anchors[1:]):
        if low_q <= quantile <= high_q:
            return low + (high - low) * (quantile - low_q) / (high_q - low_q)
    return anchors[-1][1]
