"""The search for one combination's micro-batch: the largest that fits (a memory model seeded by two measured
batches, then bisection between the last fit and the first failure), the fastest among those that fit, and the
evaluation batch. Pure logic over attempts; a worker (worker.ProbeWorker, or a fake in tests) runs them."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest


SAFETY_MARGIN = 0.10  # a fit needs peak x (1 + margin) <= budget: trials add data loading and fragmentation
# One timed step is noisy: a smaller micro-batch replaces a larger one only when clearly faster.
THROUGHPUT_TOLERANCE = 0.03
SEED_BATCHES = (4, 16)  # spread apart so the per-sample slope stands above allocator noise; powers of two, so
# they double as throughput candidates
# A first attempt judged too slow is timed again, the median of this many steps, before its combination is dropped:
# one step after a model's load ran 3x its steady time on an AVX-512 bf16 CPU (MiniLM at 3 layers, bf16, micro-batch
# 4: 0.58 s, then 0.18 against fp32's 0.20), and a bf16 that trains 1.6x faster left a sweep's space for it.
CONFIRM_TIMED_STEPS = 3


@dataclass(frozen=True)
class TimeBox:
    """A combination's time under a time limit (table.probe_all): the end of its part of the probe's share, and
    what may run past it. All times are time.monotonic()."""

    part_end: float
    part_seconds: float = 0.0  # the part's length
    share_end: float | None = None  # the end of the probe's whole share
    floor: int = 0  # the space's smallest effective batch: below it every step accumulates (see affordable)
    bounded: bool = False  # its first attempt too is stopped at part_end (a reduced precision's)


@dataclass
class MaxSearch:
    """One search for the largest fitting micro-batch: every attempt, and the bracket (last fit, first failure)."""

    worker: Any
    base: ProbeRequest
    cap: int
    limit: float  # the budget less the safety margin: a fit needs peak <= limit
    attempts: list[ProbeAttempt] = field(default_factory=list)
    last_fit: int = 0
    first_fail: int = 0  # cap + 1 until something above the last fit fails
    seed_prediction: int = 0  # what the memory model fitted on the seed batches predicted
    too_slow: str | None = None  # why the search stopped after its first attempt (see find_max_micro_batch)
    cut_short: bool = False  # its time (the probe's share of a time limit) ended it at the last fit
    timed_out: bool = False  # its first attempt ran past the deadline and was stopped: nothing measured
    _stalls: int = 0

    @property
    def open(self) -> bool:
        return self.first_fail - self.last_fit > 1

    def measure(self, batch: int, timeout: float | None = None) -> bool:
        """Run one real attempt; a failure replaces the probe process so it cannot poison the next one
        (a CUDA out-of-memory error can leave memory behind; a fresh process costs about 4 s here)."""
        attempt = self.worker.attempt(replace(self.base, batch=batch), timeout=timeout)
        self.attempts.append(attempt)
        if attempt.timed_out:
            self.timed_out = True
            return False
        if attempt.error and not attempt.out_of_memory:
            raise ProbeError(f"probe of {self.base.candidate['name']} at micro-batch {batch} failed: {attempt.error}")
        ok = _fits(attempt, self.limit)
        if not ok:
            self.worker.replace()
        return ok

    def timed_again(self, batch: int) -> ProbeAttempt:
        """`batch` trained again, its time the median of CONFIRM_TIMED_STEPS steps; kept among the attempts (the faster
        of two at one batch is the one the plan reads: ProbeResult.attempt_at, fastest_batch)."""
        request = replace(self.base, batch=batch, timed_steps=CONFIRM_TIMED_STEPS)
        attempt = self.worker.attempt(request)
        self.attempts.append(attempt)
        return attempt

    def fits(self, batch: int, timeout: float | None = None) -> bool:
        """Measure `batch` and narrow the bracket with the answer."""
        ok = self.measure(batch, timeout)
        edge = batch in (self.last_fit + 1, self.first_fail - 1)
        self.last_fit, self.first_fail = (batch, self.first_fail) if ok else (self.last_fit, batch)
        # A guess at the bracket's edge that leaves it open means the model is off by more than one sample;
        # two in a row would creep one batch at a time, so the next guess bisects instead.
        self._stalls = self._stalls + 1 if edge and self.open else 0
        return ok

    def nothing_fits(self) -> bool:
        """Nothing has fit and the line through two failures' peaks puts one sample over the limit: the step's fixed
        memory (weights, gradients, optimizer state) alone is too much. Peaks grow convexly with the batch, so the line
        drawn back to one sample lies below the true peak there: trying it would only cost an attempt (minutes on
        an LLM). A GPU's out-of-memory reports no peak, and there the bisection tries it."""
        predicted = predict_max_batch(self.attempts, self.limit) if self.last_fit == 0 else None
        return predicted is not None and predicted < 1

    def affordable(self, batch: int, box: TimeBox | None) -> int | None:
        """The batch to try next under `box`: `batch` where it ends inside the combination's part (or nothing has
        fit yet); else None (the search is cut short), except below the floor: there a micro-batch trains every
        step in pieces, and MiniLM's samples/s at micro-batch 4 were half those at 16 on one core, so the floor
        itself (or `batch`, when smaller) is tried where it costs no more than a part and ends inside the share."""
        if box is None or not self.last_fit or not self.out_of_time(batch, box.part_end):
            return batch
        target = min(batch, box.floor)
        if self.last_fit < target and box.share_end is not None and not self.out_of_time(target, box.share_end) \
                and self.predicted_seconds(target) <= box.part_seconds:
            return target
        return None

    def out_of_time(self, batch: int, deadline: float | None) -> bool:
        """Whether an attempt at `batch` would end past `deadline`: its steps timed at the last training attempt's
        seconds per sample (a CPU's samples per second barely change with the batch; the LLM example's full
        fine-tuning took 5 s a step at 4 rows and 26 s at 16)."""
        return deadline is not None and time.monotonic() + self.predicted_seconds(batch) >= deadline

    def predicted_seconds(self, batch: int) -> float:
        """An attempt's seconds at `batch`, at the last training attempt's seconds per sample (0: none timed)."""
        last = next((a for a in reversed(self.attempts) if a.mode == "train" and a.seconds_per_step > 0), None)
        return last.steps * last.seconds_per_step * batch / last.batch if last else 0.0

    def next_batch(self) -> int:
        """The memory model's guess, kept strictly inside the bracket; bisection when it has no guess or stalls."""
        predicted = predict_max_batch(self.attempts, self.limit)
        if predicted is None or self._stalls >= 2:
            return (self.last_fit + self.first_fail) // 2
        return min(max(predicted, self.last_fit + 1), self.first_fail - 1)


def _fits(attempt: ProbeAttempt, limit: float) -> bool:
    return not attempt.out_of_memory and attempt.peak_bytes <= limit


def predict_max_batch(attempts: list[ProbeAttempt], limit: float) -> int | None:
    """Fit peak = fixed + per_sample x batch through the two measured points nearest the limit; solve for it."""
    measured = [a for a in attempts if a.mode == "train" and not a.out_of_memory and a.peak_bytes > 0]
    fitting = sorted((a for a in measured if a.peak_bytes <= limit), key=lambda a: a.batch)
    failing = sorted((a for a in measured if a.peak_bytes > limit), key=lambda a: a.batch)
    # Interpolate across the bracket when one is known (most accurate); else extrapolate from the two largest fits.
    pair = [fitting[-1], failing[0]] if fitting and failing else (fitting + failing)[-2:]
    if len(pair) < 2 or pair[0].batch == pair[1].batch:
        return None
    (b1, p1), (b2, p2) = ((a.batch, a.peak_bytes) for a in pair)
    per_sample = (p2 - p1) / (b2 - b1)
    if per_sample <= 0:
        return None
    return math.floor(b1 + (limit - p1) / per_sample)


def find_max_micro_batch(worker, base: ProbeRequest, cap: int, budget: int,
                         too_slow: Callable[[ProbeAttempt], str | None] | None = None,
                         box: TimeBox | None = None) -> MaxSearch:
    """Largest batch in [1, cap] that fits `budget` less the margin: seed the memory model, then confirm and bisect.
    `too_slow` judges the first attempt: when it gives a reason, the search stops there (the batch fits; how much
    larger one would is not worth its minutes for a combination the space will drop).

    The seed batches fit a line through their peaks; its prediction is tried next (the cap itself when the line
    says the cap fits), then the bracket between the last fit and the first failure closes, one prediction or
    one bisection at a time, until the answer is exact (or two failures show that not even one sample fits).
    Where the next attempt would end past the end of `box`'s part, the search ends at its last fit, marked
    cut_short: a smaller micro-batch than the largest that fits, measured, rather than a probe longer than its share
    of a time limit (below the box's floor it may go on: MaxSearch.affordable). `box.bounded`: the first attempt too
    is stopped at the part's end (timed_out, nothing measured), for a combination the space can do without (a
    reduced precision: bf16's first step on a CPU without bf16 instructions took 25-34 s where fp32's took 12-15).
    """
    search = MaxSearch(worker, base, cap, budget / (1 + SAFETY_MARGIN), first_fail=cap + 1)
    for seed in sorted({min(b, cap) for b in SEED_BATCHES}):
        batch = search.affordable(seed, box)
        if batch is None:
            search.cut_short = True
            break
        first = box is not None and box.bounded and not search.attempts
        if not search.fits(batch, box.part_end - time.monotonic() if first else None):
            if search.timed_out:
                return search
            break
        if too_slow is not None and len(search.attempts) == 1:
            search.too_slow = _confirmed_too_slow(search, too_slow, box)
            if search.too_slow:
                return search  # far slower than another combination already measured: how far it fits is moot
    search.seed_prediction = predict_max_batch(search.attempts, search.limit) or 0
    while search.open:
        if search.nothing_fits():
            search.first_fail = 1
            break
        batch = search.affordable(search.next_batch(), box)
        if batch is None:
            search.cut_short = True
            break
        search.fits(batch)
    return search


def _confirmed_too_slow(search: MaxSearch, too_slow: Callable[[ProbeAttempt], str | None],
                        box: TimeBox | None) -> str | None:
    """Why the first attempt's combination is too slow to probe further, confirmed by timing it again (one timed step
    can be a spike); the first verdict stands where the second timing would end past the combination's part of a
    time limit, or fails."""
    first = search.attempts[0]
    reason = too_slow(first)
    confirming_seconds = search.predicted_seconds(first.batch) * (1 + CONFIRM_TIMED_STEPS) / max(first.steps, 1)
    if reason is None or (box is not None and time.monotonic() + confirming_seconds >= box.part_end):
        return reason
    again = search.timed_again(first.batch)
    if again.error or again.out_of_memory or again.timed_out or again.seconds_per_step <= 0:
        return reason
    return too_slow(again)


def past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def throughput_candidates(max_batch: int, tried: set[int]) -> list[int]:
    """The largest power of two <= max and half of it, untried: sizes every power-of-two effective batch divides."""
    if max_batch < 1:
        return []
    top = 1 << (max_batch.bit_length() - 1)
    return [b for b in (top, top // 2) if b >= 1 and b not in tried]


def fastest_batch(attempts: list[ProbeAttempt], limit: float, max_batch: int) -> int:
    """The largest fitting batch (max or a power of two) within THROUGHPUT_TOLERANCE of the best samples/s."""
    usable = [a for a in attempts if a.mode == "train" and _fits(a, limit) and a.seconds_per_step > 0
              and (a.batch == max_batch or a.batch & (a.batch - 1) == 0) and a.batch <= max_batch]
    if not usable:
        return max_batch
    best = max(a.samples_per_second for a in usable)
    return max(a.batch for a in usable if a.samples_per_second >= best * (1 - THROUGHPUT_TOLERANCE))


def find_eval_batch(worker, base: ProbeRequest, max_batch: int, budget: int) -> tuple[int, ProbeAttempt | None]:
    """Confirmed, not derived: one no_grad forward at 2x the train max; if it fails, the train max itself
    (a forward without gradients never needs more memory than a training step at the same batch)."""
    if max_batch < 1:
        return 0, None
    attempt = worker.attempt(replace(base, batch=2 * max_batch, mode="eval"))
    if attempt.error and not attempt.out_of_memory:
        raise ProbeError(f"eval probe of {base.candidate['name']} failed: {attempt.error}")
    if _fits(attempt, budget / (1 + SAFETY_MARGIN)):
        return 2 * max_batch, attempt
    worker.replace()
    return max_batch, attempt


class ProbeError(RuntimeError):
    """A probe attempt broke for a reason other than memory (the model cannot train at all)."""
