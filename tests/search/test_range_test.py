"""Reading a learning-rate range test, and the narrowed ranges reaching the space the trials sample."""

from __future__ import annotations

import math

import pytest

from finesweep.search.budget.range_test import affordable
from finesweep.search.range_test import Narrowing, learning_rates, read_test, wide_ranges
from finesweep.spaces import SweepConfig
from finesweep.spaces.space_config import FloatRange
from finesweep.trainer.lr_range import RangeStep, step_rate

LOW, HIGH, STEPS = 1e-5, 1e-1, 20


def _steps(losses: list[float]) -> list[RangeStep]:
    return [RangeStep(i, step_rate(LOW, HIGH, len(losses), i), loss) for i, loss in enumerate(losses, start=1)]


def test_a_loss_that_falls_then_climbs_narrows_to_the_decade_ending_at_its_lowest():
    losses = [2.0 - 0.08 * i for i in range(14)] + [1.0, 1.3, 1.9, 2.8, 4.0, 6.0]  # lowest at step 14
    low, high, reading = read_test(_steps(losses), LOW, HIGH)
    lowest_rate = step_rate(LOW, HIGH, STEPS, 14)
    assert high / low == pytest.approx(10.0) and LOW <= low
    assert step_rate(LOW, HIGH, STEPS, 12) <= high <= step_rate(LOW, HIGH, STEPS, 16), "the smoothed lowest"
    assert high < HIGH and "rose past it" in reading and lowest_rate > low


def test_a_loss_still_falling_at_the_top_keeps_the_upper_decade():
    low, high, reading = read_test(_steps([3.0 - 0.1 * i for i in range(STEPS)]), LOW, HIGH)
    assert (low, high) == pytest.approx((HIGH / 10, HIGH)) and "still falling" in reading


def test_a_loss_that_only_climbs_narrows_to_a_decade_a_decade_under_the_climb():
    losses = [1.1] * 15 + [1.3, 1.8, 2.5, 3.5, 5.0]
    low, high, reading = read_test(_steps(losses), LOW, HIGH)
    climbed = next(s.step for s in _steps(losses) if s.loss > 1.2)  # the smoothed loss lags a step or two behind
    assert step_rate(LOW, HIGH, STEPS, climbed) / 10 <= high <= step_rate(LOW, HIGH, STEPS, climbed + 2) / 10 * 1.0001
    assert high / low == pytest.approx(10.0) and "did not fall" in reading


def test_a_flat_or_short_test_keeps_the_range():
    assert read_test(_steps([1.1, 1.09, 1.1, 1.11] * 5), LOW, HIGH)[:2] == (LOW, HIGH)
    assert read_test(_steps([1.0, math.nan]), LOW, HIGH)[:2] == (LOW, HIGH)


def test_a_loss_that_diverges_to_nan_reads_the_nan_as_its_climb():
    losses = [1.1] * 12 + [math.nan]
    low, high, _ = read_test(_steps(losses), LOW, HIGH)
    assert high <= step_rate(LOW, HIGH, 13, 13) / 10 * 1.0001


def _config(space: dict) -> SweepConfig:
    return SweepConfig.model_validate({"name": "t", "data": {"path": "d.csv"}, "space": space,
                                       "models": [{"name": "a", "path": "m"}]})


def test_only_ranges_wider_than_a_decade_are_tested():
    config = _config({"method": ["full", "lora"],
                      "learning_rate": {"full": {"low": 1e-5, "high": 1e-4}, "lora": {"low": 5e-5, "high": 1e-3}}})
    assert list(wide_ranges(config)) == ["lora"]


def test_the_narrowed_ranges_are_what_the_trials_sample_and_span_every_models_answer():
    config = _config({"method": ["full", "lora"]})
    narrowings = [Narrowing("a", "lora", 5e-5, 1e-3, 1e-4, 1e-3, ""), Narrowing("b", "lora", 5e-5, 1e-3, 6e-5, 6e-4, ""),
                  Narrowing("a", "full", 1e-6, 1e-4, 1e-6, 1e-4, "")]
    rates = learning_rates(narrowings)
    assert rates == {"lora": [6e-5, 1e-3]}, "full was kept as written: no entry"
    sampled = config.space.with_learning_rates(rates)
    assert sampled.float_dimension("learning_rate", "lora") == FloatRange(low=6e-5, high=1e-3, log=True)
    assert sampled.float_dimension("learning_rate", "full") == config.space.float_dimension("learning_rate", "full")
    one = _config({"method": ["lora"]}).space.with_learning_rates({"lora": [1e-4, 1e-3]})
    assert one.learning_rate == FloatRange(low=1e-4, high=1e-3, log=True)


def test_auto_runs_the_tests_only_where_they_cost_a_small_share_of_the_sweeps_time():
    config = _config({}).model_copy()
    limited = SweepConfig.model_validate({**config.model_dump(mode="json"), "search": {"time_limit": "10m"}})
    assert affordable(limited, 25.0)[0] and not affordable(limited, 40.0)[0]
    assert affordable(config, 1e6)[0], "no budget: the tests run"
    off = SweepConfig.model_validate({**config.model_dump(mode="json"), "search": {"lr_range_test": False}})
    assert off.search.lr_range_test == "off" and not affordable(off, 0.0)[0]
