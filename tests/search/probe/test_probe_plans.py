"""Gradient checkpointing as a memory lever: measured where it can matter, chosen by measured speed."""

from __future__ import annotations

import pytest

from finesweep.search.probe.table import ProbeResult, checkpointing_plan


def _result(checkpointing: bool, max_micro: int, micro: int, seconds_per_step: float) -> ProbeResult:
    attempts = [{"batch": micro, "peak_bytes": 1, "seconds_per_step": seconds_per_step, "mode": "train"}]
    return ProbeResult(model="m", precision="fp32", method="full", seq_len=64, device="cpu", budget_bytes=2**30,
                       max_micro_batch=max_micro, attempts=attempts, micro_batch=micro, best_micro_batch=micro,
                       gradient_checkpointing=checkpointing)


def _measuring(plans: dict[bool, ProbeResult]):
    asked: list[bool] = []

    def measured(checkpointing: bool) -> ProbeResult:
        asked.append(checkpointing)
        return plans[checkpointing]

    return measured, asked


def test_auto_skips_checkpointing_when_the_largest_effective_batch_fits_in_one_micro_batch():
    measured, asked = _measuring({False: _result(False, 32, 32, 1.0), True: _result(True, 64, 64, 1.0)})
    chosen = checkpointing_plan(measured, "auto", cap=32)
    assert asked == [False] and not chosen.gradient_checkpointing and chosen.alternative is None


def test_auto_takes_the_faster_plan_when_accumulation_is_needed():
    # Without recompute micro 8 at 8 samples/s; with it micro 32 at 16 samples/s: the recompute pays for itself.
    measured, asked = _measuring({False: _result(False, 8, 8, 1.0), True: _result(True, 32, 32, 2.0)})
    chosen = checkpointing_plan(measured, "auto", cap=32)
    assert asked == [False, True] and chosen.gradient_checkpointing and chosen.micro_batch == 32
    assert chosen.alternative == {"gradient_checkpointing": False, "max_micro_batch": 8, "micro_batch": 8,
                                  "samples_per_second": 8.0}
    # ...and keeps the plain plan when the recompute costs more than the larger batch brings.
    measured, _ = _measuring({False: _result(False, 8, 8, 1.0), True: _result(True, 32, 32, 8.0)})
    chosen = checkpointing_plan(measured, "auto", cap=32)
    assert not chosen.gradient_checkpointing and chosen.alternative["gradient_checkpointing"] is True


def test_auto_recomputes_when_nothing_fits_without_it():
    measured, _ = _measuring({False: _result(False, 0, 0, 0.0), True: _result(True, 4, 4, 1.0)})
    assert checkpointing_plan(measured, "auto", cap=32).max_micro_batch == 4


def test_on_and_off_measure_one_plan_only():
    plans = {False: _result(False, 8, 8, 1.0), True: _result(True, 32, 32, 2.0)}
    for setting, expected in (("on", [True]), ("off", [False])):
        measured, asked = _measuring(plans)
        checkpointing_plan(measured, setting, cap=32)
        assert asked == expected


def test_auto_does_not_measure_recompute_for_a_combination_too_slow_to_keep():
    plain = _result(False, 4, 4, 7.0)
    plain.too_slow = "0.57 samples/s at micro-batch 4, against 5.00 for m|fp32|full"
    measured, asked = _measuring({False: plain, True: _result(True, 32, 32, 20.0)})
    assert checkpointing_plan(measured, "auto", cap=32) is plain and asked == [False]


def test_auto_does_not_measure_recompute_when_the_weights_alone_exceed_the_budget():
    """Peaks of 1.70 GiB at micro-batches 1, 2 and 4 against a 1 GiB budget (as a CPU measures a model too large):
    the part that does not grow with the batch is over the budget, and recomputing only saves activations."""
    from finesweep.search.probe.table import static_bytes

    gib = 2**30
    too_large = _result(False, 0, 0, 0.0)
    too_large.attempts = [{"batch": b, "peak_bytes": int(1.70 * gib + b * 2**20), "mode": "train"} for b in (4, 2, 1)]
    assert static_bytes(too_large) == pytest.approx(1.70 * gib, rel=1e-6)
    measured, asked = _measuring({False: too_large, True: _result(True, 4, 4, 1.0)})
    assert checkpointing_plan(measured, "auto", cap=32) is too_large and asked == [False]
    # Activations that fill the budget (0.2 GiB of weights): the recompute plan is measured.
    activations = _result(False, 0, 0, 0.0)
    activations.attempts = [{"batch": b, "peak_bytes": int(0.2 * gib + b * 0.9 * gib), "mode": "train"} for b in (2, 1)]
    measured, asked = _measuring({False: activations, True: _result(True, 4, 4, 1.0)})
    assert checkpointing_plan(measured, "auto", cap=32).max_micro_batch == 4 and asked == [False, True]
    # A GPU's out-of-memory attempts report no peak: nothing to go on, so the recompute plan is measured as before.
    assert static_bytes(_result(False, 0, 0, 0.0)) is None
