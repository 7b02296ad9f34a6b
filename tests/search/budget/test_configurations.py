"""A small budget compares configurations before it trains one further (search/budget/schedule.py's
configurations_first, winner.py's leaving_configurations): the periods shorten and the winner's share gives way
until ASHA's configurations start and evaluate, and the shipped examples' plans at a 10-minute limit on 2 CPU cores
start at least eight."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from finesweep.search.budget import limit, schedule
from finesweep.search.budget.plan import PlanInputs, search_plan
from finesweep.search.budget.simulate import Lane, asha_milestones, simulate
from finesweep.search.budget.speed import CombinationTimes
from finesweep.search.budget.winner import WINNER_SHARE_FLOOR, leaving_configurations
from finesweep.spaces import SweepConfig
from finesweep.spaces.loader import load

SWEEPS = Path(__file__).resolve().parents[3] / "sweeps"


def times(key: str, step: float, evaluation: float, start: float = 10.0) -> CombinationTimes:
    return CombinationTimes(key, samples_per_second=24 / step, eval_samples_per_second=1.0, seconds_per_step=step,
                            seconds_per_evaluation=evaluation, start_seconds=start)


def _search(**search) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "compared", "data": {"path": "data.csv", "splits": {"train": 100, "validation": 80, "test": 40}},
        "models": [{"name": "a", "path": "a"}], "space": {"effective_batch_size": [24]},
        "search": {"num_trials": 10, "max_concurrent_trials": 2, "eval_every_steps": 75, "max_steps": 750,
                   "asha": {"grace_period": 2, "reduction_factor": 3}, **search}}).search


def _median_started(combinations, period: float, evaluations: int, search, seconds: float) -> int:
    lanes = [Lane(schedule.lane_period(c, period), 1, c.start_seconds) for c in combinations]
    milestones = asha_milestones(evaluations, search.asha.grace_period, search.asha.reduction_factor)
    runs = sorted(simulate(lanes, evaluations=evaluations, num_trials=10, concurrency=2, milestones=milestones,
                           reduction_factor=search.asha.reduction_factor, time_budget=seconds, step_budget=None,
                           seed=seed).started for seed in range(31))
    return runs[len(runs) // 2]


def test_a_small_budget_shortens_the_periods_until_eight_configurations_start_and_evaluate():
    """The tweets example's costs: 0.3 s a step, 2.6 s an evaluation (fp32: 0.38 and 5.1); 75 steps make a 25-s
    period, and a trial filling 140 s leaves room for four trials. Shortened, eight start, with ASHA's two rungs."""
    fast, slow = times("bf16", 0.30, 2.6), times("fp32", 0.38, 5.1)
    search = _search()
    filling, _ = schedule.trials_schedule([fast, slow], search.model_copy(update={"scheduler": "none"}), 75, 140.0,
                                          [24], 2)
    assert filling.period_seconds == pytest.approx(25.1, abs=0.1), "without ASHA: the fastest's 75 steps"
    shortened, _ = schedule.trials_schedule([fast, slow], search, 75, 140.0, [24], 2)
    assert schedule.shortest_period([fast, slow]) == 5.2 <= shortened.period_seconds < filling.period_seconds
    assert shortened.evaluations == 6, "up to ASHA's second rung (grace 2 x reduction factor 3)"
    assert _median_started([fast, slow], shortened.period_seconds, 6, search, 140.0) >= 8
    assert _median_started([fast, slow], filling.period_seconds, 5, search, 140.0) < 8
    assert shortened.notes[0].startswith(f"trials allotted time: 6 evaluation periods of "
                                         f"{shortened.period_seconds:.0f} s each, shortened from 25 s so that 8 "
                                         "configurations start and evaluate in the trials' 140 s")
    long_trials = search.model_copy(update={"max_steps": 7500})
    roomy, _ = schedule.trials_schedule([fast, slow], long_trials, 75, 1200.0, [24], 2)
    assert (roomy.period_seconds, roomy.evaluations) == (pytest.approx(25.1, abs=0.1), 47), \
        "not a small budget (eight reach the first rung at 25-s periods in 1200 s): trials as long as it pays for"
    two_evaluations = search.model_copy(update={"max_steps": 150})
    stepped, _ = schedule.trials_schedule([fast, slow], two_evaluations, 75, 150.0, [24], 2)
    assert stepped.period_seconds is not None and "shortened from 34 s" in stepped.notes[0], \
        "a budget that pays for one trial's max_steps but not for eight configurations: shortened too"
    hopeless, _ = schedule.trials_schedule([fast, slow], search, 75, 40.0, [24], 2)
    assert "shortened" not in hopeless.notes[0], "no period starts eight: the schedule as it was"


def test_a_combination_that_evaluates_slower_than_half_a_period_trains_a_step_and_its_period_runs_longer():
    quick, slow_eval = times("quick", 0.3, 2.0), times("slow-eval", 1.0, 30.0)
    assert schedule.shortest_period([quick, slow_eval]) == 4.0
    assert schedule.lane_period(slow_eval, 4.0) == 31.0 and schedule.lane_period(quick, 4.0) == 4.0


def test_the_configurations_compared_are_the_files_trials_up_to_eight_and_one_without_asha():
    assert schedule.configurations_compared(_search(num_trials=6)) == 6
    assert schedule.configurations_compared(_search(num_trials=50)) == schedule.CONFIGURATIONS_COMPARED == 8
    assert schedule.configurations_compared(_search(scheduler="none")) == 1


def test_the_winners_share_gives_way_to_the_configurations_down_to_its_floor_and_says_which():
    share, words = leaving_configurations(500.0, 0.75, halving=200.0, configurations=8)
    assert share == 0.55 and 500 * (1 - share) >= 1.1 * 200 and "so that 8 configurations start, evaluate" in words
    assert leaving_configurations(500.0, 0.4, halving=200.0, configurations=8) == (0.4, ""), "room already"
    assert leaving_configurations(500.0, 0.75, halving=200.0, configurations=1) == (0.75, ""), "nothing to compare"
    floored, words = leaving_configurations(500.0, 0.75, halving=400.0, configurations=8)
    assert floored == WINNER_SHARE_FLOOR and "to the least it leaves the winner: 8 configurations halved by ASHA " \
                                            "need 440 s" in words


# What `finesweep plan FILE --time-limit 10m` measured for the shipped examples (Intel Xeon, AVX-512 bf16 and AMX,
# 2 cores, 2026-12-06): each combination's samples/s, s/step, s/evaluation, and the data and probe's seconds.
TWEETS = [CombinationTimes(f"{model}|{precision}|full", speed, 200.0, step, evaluation, weight_bytes=90_864_192)
          for model in ("minilm-mean", "minilm-cls")
          for precision, speed, step, evaluation in (("fp32", 31.2, 0.38, 5.1), ("bf16", 40.6, 0.30, 2.6))]
CHAT = [CombinationTimes(f"smollm2-135m|{precision}|{method}", speed, 5.0, step, evaluation,
                         decode_seconds_per_token=0.065, weight_bytes=538_060_032, start_seconds=12.0)
        for precision, method, speed, step, evaluation in (
            ("fp32", "full", 1.6, 4.92, 21.3), ("fp32", "lora", 2.1, 3.77, 23.9),
            ("bf16", "full", 2.7, 2.91, 9.5), ("bf16", "lora", 2.9, 2.75, 13.9))]


@pytest.mark.parametrize("sweep,combinations,elapsed,train_rows,seq_len", [
    ("tweets.yaml", TWEETS, 23.0, 20_000, 64), ("smollm2-chat.yaml", CHAT, 80.0, 630, 96)])
def test_the_shipped_examples_at_a_ten_minute_limit_on_two_cores_start_and_evaluate_eight_configurations(
        sweep, combinations, elapsed, train_rows, seq_len):
    config = load(SWEEPS / sweep)
    config = config.model_copy(update={"search": config.search.model_copy(
        update={"time_limit": "10m", "time_budget_minutes": None})})
    inputs = PlanInputs(combinations, 2, train_rows, config.data.splits.test, seq_len, elapsed_seconds=elapsed)
    plan = search_plan(config, inputs, limit.within_limit(config, inputs, 600, elapsed))
    assert plan.num_trials >= 8 and plan.simulated.started >= 8, plan.notes
    assert plan.predicted_wall_seconds <= 600
    assert plan.exploit_share >= WINNER_SHARE_FLOOR, "the winner still trains further"
    fewer = replace(inputs, combinations=[replace(c, seconds_per_evaluation=4 * c.seconds_per_evaluation)
                                          for c in combinations])
    assert search_plan(config, fewer, limit.within_limit(config, fewer, 600, elapsed)).simulated.started < 8, \
        "evaluations four times as long: fewer start, so the count above is the budget's, not a constant"
