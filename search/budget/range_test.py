"""The learning-rate range test's time: its length in steps, its predicted seconds from the probe's speeds, and
whether search.lr_range_test auto lets it run. Pure."""

from __future__ import annotations

from finesweep.search.budget.measured import TRIAL_START_SECONDS
from finesweep.spaces import SweepConfig

# Optimizer steps of one test: a fifth of the usual hundred (fastai's default), which a small CPU budget cannot pay
# for; over a range of one to two decades each step raises the rate by 12-26%.
RANGE_TEST_STEPS = 20
# Under auto, the tests of a sweep together take at most this share of its time: they narrow where the trials
# sample, and a budget spent on them is a budget its trials do not train.
RANGE_TEST_SHARE = 0.05


# A forward pass without gradients costs about a third of a training step's forward and backward over the same rows.
FORWARD_SHARE = 1 / 3


def range_test_seconds(samples_per_second: float, effective_batch: int, held_out_rows: int,
                       load_seconds: float) -> float:
    """One test's predicted seconds: its process's start and imports, the model's load, and its steps at the probe's
    measured speed, each followed by a forward pass over `held_out_rows` (trainer/lr_range.py). The probe timed a
    trial's threads; the test runs on every core, so this errs long."""
    rows = effective_batch + FORWARD_SHARE * held_out_rows
    return TRIAL_START_SECONDS + load_seconds + RANGE_TEST_STEPS * rows / max(samples_per_second, 1e-9)


def sweep_seconds(config: SweepConfig) -> float | None:
    """The sweep's time that RANGE_TEST_SHARE is a share of: search.time_limit, else time_budget_minutes (None:
    neither; auto then tests every wide range)."""
    search = config.search
    if search.time_limit_seconds:
        return search.time_limit_seconds
    return search.time_budget_minutes * 60 if search.time_budget_minutes else None


def affordable(config: SweepConfig, predicted: float) -> tuple[bool, str]:
    """Whether tests predicted to take `predicted` seconds together run, and why in words."""
    setting = config.search.lr_range_test
    if setting != "auto":
        return setting == "on", f"search.lr_range_test: {setting}"
    total = sweep_seconds(config)
    if total is None:
        return True, "no time budget"
    share = predicted / total
    verdict = "within" if share <= RANGE_TEST_SHARE else "over"
    return share <= RANGE_TEST_SHARE, (f"{predicted:.0f} s predicted, {share:.0%} of the sweep's {total:.0f} s: "
                                       f"{verdict} auto's {RANGE_TEST_SHARE:.0%}")
