"""The memory probe: the bisection logic, and the real thing on a tiny model in a real probe process."""

from __future__ import annotations

import math

import pytest

from finesweep.search.device import resolve_device
from finesweep.search.probe import SAFETY_MARGIN, ProbeError, ProbeWorker, find_max_micro_batch
from finesweep.spaces import ModelCandidate
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest

MB = 2**20


class LinearMemoryWorker:
    """Memory grows linearly with the batch, like activations do; counts attempts and replacements."""

    def __init__(self, base: int, per_sample: int):
        self.base, self.per_sample = base, per_sample
        self.batches: list[int] = []
        self.replaced = 0

    def attempt(self, request: ProbeRequest) -> ProbeAttempt:
        self.batches.append(request.batch)
        return ProbeAttempt(request.batch, self.base + self.per_sample * request.batch, 0.1)

    def replace(self) -> None:
        self.replaced += 1


def request(batch: int = 64) -> ProbeRequest:
    return ProbeRequest(candidate={"name": "m", "path": "/x"}, task="classification", num_labels=2,
                        precision="fp32", method="full", seq_len=16, batch=batch)


@pytest.mark.parametrize("budget_mb,cap", [(1000, 64), (300, 64), (150, 64), (5000, 64), (120, 7), (111, 64)])
def test_bisection_finds_the_exact_largest_fitting_batch_in_few_attempts(budget_mb, cap):
    worker = LinearMemoryWorker(base=100 * MB, per_sample=MB)
    budget = budget_mb * MB
    best, attempts = find_max_micro_batch(worker, request(), cap, budget)
    fits = lambda b: (100 * MB + b * MB) * (1 + SAFETY_MARGIN) <= budget  # noqa: E731
    expected = max([b for b in range(1, cap + 1) if fits(b)], default=0)
    assert best == expected
    assert len(attempts) <= 1 + math.ceil(math.log2(cap))
    assert worker.replaced == sum(1 for b in worker.batches if not fits(b))  # a failed attempt never poisons the next


def test_a_probe_that_breaks_for_another_reason_than_memory_is_an_error():
    class Broken(LinearMemoryWorker):
        def attempt(self, req):
            return ProbeAttempt(req.batch, 0, 0.0, error="ValueError: bad model")

    with pytest.raises(ProbeError, match="bad model"):
        find_max_micro_batch(Broken(0, 0), request(), 8, 10**9)


def test_real_probe_process_measures_peak_memory_and_bisects_to_the_budget(tiny_classifier):
    """Real steps in a real spawned process: the answer's peak fits the budget and the next batch's does not."""
    device = resolve_device()
    worker = ProbeWorker(device, threads=1)
    base = ProbeRequest(candidate=ModelCandidate(name="t", path=str(tiny_classifier)).model_dump(),
                        task="classification", num_labels=3, precision="fp32", method="full", seq_len=128, batch=1)
    try:
        small = worker.attempt(base)
        large = worker.attempt(ProbeRequest(**{**base.__dict__, "batch": 512}))
        assert small.error is None and large.error is None
        assert large.peak_bytes > small.peak_bytes > 0 and small.seconds_per_step > 0
        # A budget between the two peaks makes the answer lie strictly between 1 and 512.
        budget = int((small.peak_bytes + large.peak_bytes) / 2 * (1 + SAFETY_MARGIN))
        best, attempts = find_max_micro_batch(worker, base, 512, budget)
    finally:
        worker.close()
    assert 1 < best < 512
    by_batch = {a.batch: a for a in attempts}
    assert by_batch[best].peak_bytes * (1 + SAFETY_MARGIN) <= budget
    failed_above = [a for a in attempts if a.batch > best]
    assert failed_above and all(a.peak_bytes * (1 + SAFETY_MARGIN) > budget for a in failed_above)
