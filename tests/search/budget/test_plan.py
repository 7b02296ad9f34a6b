"""The search planned from the probe's speeds (search/budget/plan.py): ASHA's rungs as Ray lays them out, the
simulated search, the trial length a budget pays for, and the plan of a whole sweep file."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import numpy as np
import pytest

from finesweep.search.budget import export_time, measured
from finesweep.search.budget import plan as planning
from finesweep.search.budget.plan import CombinationTimes, Lane, asha_milestones, simulate
from finesweep.search.budget.speed import ANCHORS, length_grouped_megabatch, padded_fraction
from finesweep.search.budget.schedule import BUDGET_MARGIN, planned_schedule
from finesweep.search.probe.table import ProbeResult
from finesweep.search.tuning import ray_compat
from finesweep.spaces import Quantization, SweepConfig, Task, parse_duration
from finesweep.trainer.data.lengths import percentiles
from finesweep.trainer.serving.evaluate import SPEED_SECONDS, WARM_UP_ROWS
from tests.search.budget.planning import export_seconds, plan_search

START = planning.TRIAL_START_SECONDS


def times(key: str, step: float, evaluation: float) -> CombinationTimes:
    return CombinationTimes(key, samples_per_second=1.0, eval_samples_per_second=1.0, seconds_per_step=step,
                            seconds_per_evaluation=evaluation)


def probe(model: str, precision: str, train_per_second: float, eval_per_second: float | None = 40.0,
          too_slow: str | None = None) -> ProbeResult:
    attempts = [{"batch": 8, "peak_bytes": 1, "seconds_per_step": 8 / train_per_second, "steps": 3}]
    if eval_per_second:
        attempts.append({"batch": 16, "peak_bytes": 1, "seconds_per_step": 16 / eval_per_second, "steps": 1,
                         "mode": "eval"})
    return ProbeResult(model=model, precision=precision, method="full", seq_len=64, device="cpu", budget_bytes=2**30,
                       max_micro_batch=8, attempts=attempts, best_micro_batch=8, micro_batch=8, too_slow=too_slow)


@pytest.mark.parametrize("max_t,grace,rf", [(8, 1, 3), (9, 1, 3), (27, 1, 3), (10, 2, 2), (4, 4, 3), (20, 3, 4)])
def test_asha_milestones_are_where_ray_puts_its_rungs(max_t, grace, rf):
    from ray.tune.schedulers import ASHAScheduler

    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=max_t, grace_period=grace, reduction_factor=rf)
    assert asha_milestones(max_t, grace, rf) == ray_compat.asha_milestones_of(scheduler)


def test_without_asha_or_budget_every_trial_trains_to_its_end_and_slots_share_them():
    lanes = [Lane(period_seconds=15.0, steps=10)]
    run = simulate(lanes, evaluations=4, num_trials=4, concurrency=2, milestones=None,
                   reduction_factor=3, time_budget=None, step_budget=None, seed=0)
    assert (run.started, run.completed, run.stopped_early, run.cut_by_budget) == (4, 4, 0, 0)
    assert run.seconds == pytest.approx(2 * (START + 4 * 15.0))  # two trials one after the other in each slot


def test_asha_stops_a_trial_below_the_cutoff_of_those_recorded_at_its_rung():
    lanes = [Lane(period_seconds=10.0, steps=10)]
    # One slot: trials reach rung 1 in order. Ray's rule: the first always goes on; later ones stop when below the
    # (1 - 1/3) percentile of the qualities recorded there.
    run = simulate(lanes, evaluations=3, num_trials=4, concurrency=1, milestones=[1],
                   reduction_factor=3, time_budget=None, step_budget=None, seed=0, qualities=[0.5, 0.9, 0.1, 0.95])
    # 0.5 first: on. 0.9 >= 0.5: on. 0.1 < percentile([0.5, 0.9], 2/3) = 0.767: stopped. 0.95: on.
    assert (run.completed, run.stopped_early) == (3, 1)
    assert run.seconds == pytest.approx(4 * START + 3 * 30.0 + 10.0)


def test_a_time_budget_cuts_the_running_trials_and_starts_no_more():
    lanes = [Lane(period_seconds=10.0, steps=10)]
    run = simulate(lanes, evaluations=10, num_trials=10, concurrency=2, milestones=None,
                   reduction_factor=3, time_budget=200.0, step_budget=None, seed=0)
    # Each slot: trial 1 runs 10 + 100 s, trial 2 starts at 110 and is cut at 200.
    assert (run.started, run.completed, run.cut_by_budget) == (4, 2, 2)
    assert run.seconds == pytest.approx(200.0)


def test_a_trial_that_could_not_evaluate_before_the_budget_ends_is_not_started():
    """The tweets example at 357 s: two trials completed at the trials' share and two more were started, stopped
    at once, and held the winner back 10 s. A trial due to start after budget - start - one period is not."""
    lanes = [Lane(period_seconds=30.0, steps=10)]
    run = simulate(lanes, evaluations=2, num_trials=4, concurrency=2, milestones=None,
                   reduction_factor=3, time_budget=100.0, step_budget=None, seed=0)
    assert (run.started, run.completed, run.cut_by_budget) == (2, 2, 0)  # done at 70 s: 70 + 10 + 30 > 100
    roomy = simulate(lanes, evaluations=2, num_trials=4, concurrency=2, milestones=None,
                     reduction_factor=3, time_budget=110.0, step_budget=None, seed=0)
    assert (roomy.started, roomy.cut_by_budget) == (4, 2), "at 110 s they reach one evaluation: started"


def test_a_step_budget_ends_the_search_when_its_steps_are_spent():
    lanes = [Lane(period_seconds=10.0, steps=10)]
    run = simulate(lanes, evaluations=5, num_trials=10, concurrency=1, milestones=None,
                   reduction_factor=3, time_budget=None, step_budget=120, seed=0)
    assert (run.started, run.completed, run.cut_by_budget) == (3, 2, 1)


def test_trials_running_at_once_spend_the_step_budget_together():
    lanes = [Lane(period_seconds=10.0, steps=10)]
    run = simulate(lanes, evaluations=5, num_trials=10, concurrency=2, milestones=None,
                   reduction_factor=3, time_budget=None, step_budget=60, seed=0)
    # Both report 10 steps every 10 s: the 60th step is spent at their third evaluations, and neither finishes.
    assert (run.started, run.completed, run.cut_by_budget) == (2, 0, 2)
    assert run.seconds == pytest.approx(START + 30.0)


def test_a_budget_that_pays_for_every_combinations_max_steps_keeps_them():
    fast, slow = times("fast", step=0.5, evaluation=5.0), times("slow", step=2.0, evaluation=10.0)  # 30 s, 110 s
    schedule = planned_schedule([fast, slow], max_steps=200, eval_every_steps=50, time_budget=600.0,
                                step_budget=None, concurrency=2)
    assert (schedule.evaluations, schedule.period_seconds, schedule.notes) == (4, None, [])  # 10 + 4 x 110 <= 600


def test_a_time_budget_too_short_for_the_slowest_allots_time_in_the_fastests_periods():
    fast, slow = times("fast", step=0.5, evaluation=5.0), times("slow", step=2.0, evaluation=10.0)  # 30 s, 110 s
    schedule = planned_schedule([fast, slow], max_steps=2000, eval_every_steps=50, time_budget=600.0,
                                step_budget=None, concurrency=2)
    assert schedule.period_seconds == 30.0 and schedule.evaluations == int((600 - START) // 30.0)
    assert "fast" in schedule.notes[0] and "slow" in schedule.notes[0]
    capped = planned_schedule([fast, slow], max_steps=400, eval_every_steps=50, time_budget=600.0,
                              step_budget=None, concurrency=2)
    assert (capped.evaluations, capped.period_seconds) == (8, 30.0)  # never more than the file's max_steps
    hopeless = planned_schedule([slow], max_steps=400, eval_every_steps=50, time_budget=60.0,
                                step_budget=None, concurrency=2)
    assert hopeless.evaluations == 1 and any("does not pay for one evaluation" in n for n in hopeless.notes)


def test_the_periods_stretch_to_fill_the_budget_but_never_past_max_steps():
    fast, slow = times("fast", step=0.5, evaluation=5.0), times("slow", step=2.0, evaluation=10.0)  # 30 s, 110 s
    # 12 periods of 30 s fit after a trial's start in 395 s, and leave 25 s: more than the margin (20 s), so the
    # periods grow until a trial started first ends at 95% of the budget.
    schedule = planned_schedule([fast, slow], max_steps=2000, eval_every_steps=50, time_budget=395.0,
                                step_budget=None, concurrency=2)
    assert schedule.evaluations == 12 and "stretched" in schedule.notes[0]
    assert START + 12 * schedule.period_seconds == pytest.approx(395.0 * (1 - BUDGET_MARGIN))
    # 1 period of 30 s fits in 69 s; filling 95% of it would train fast 111 steps, past max_steps (100): the
    # stretch stops where fast trains exactly those.
    capped = planned_schedule([fast], max_steps=100, eval_every_steps=50, time_budget=69.0,
                              step_budget=None, concurrency=2)
    assert capped.evaluations == 1 and capped.period_seconds == pytest.approx(5.0 + 100 * 0.5)
    # A budget that leaves less than the margin keeps the fastest's period.
    kept = planned_schedule([fast, slow], max_steps=2000, eval_every_steps=50, time_budget=385.0,
                            step_budget=None, concurrency=2)
    assert kept.period_seconds == 30.0 and "stretched" not in kept.notes[0]


def test_with_one_trial_at_a_time_a_trial_takes_half_the_budget_so_that_two_are_compared():
    """A trial that filled the budget with one slot was the only trial: the baseline, which ASHA never stops. The
    LLM file of benchmarks/llm-time-limit/ planned one trial at every budget up to 60 minutes."""
    fast, slow = times("fast", step=0.5, evaluation=5.0), times("slow", step=2.0, evaluation=10.0)  # 30 s, 110 s
    one = planned_schedule([fast, slow], max_steps=2000, eval_every_steps=50, time_budget=600.0, step_budget=None,
                           concurrency=1)
    assert one.evaluations == int((300 - START) // 30.0)
    assert START + one.evaluations * one.period_seconds == pytest.approx(300 * (1 - BUDGET_MARGIN))
    assert "inside its room of 50% of the trials' budget (with 1 trial at a time, so that 2 trials are compared): " \
           "300 s" in one.notes[0]
    two = planned_schedule([fast, slow], max_steps=2000, eval_every_steps=50, time_budget=600.0, step_budget=None,
                           concurrency=2)
    assert two.evaluations == int((600 - START) // 30.0) and "room" not in two.notes[0], "two slots: as before"
    kept = planned_schedule([fast, slow], max_steps=100, eval_every_steps=50, time_budget=600.0, step_budget=None,
                            concurrency=1)
    assert (kept.evaluations, kept.period_seconds) == (2, None), "max_steps fits in the room: 10 + 2 x 110 <= 300"
    # Half the budget does not pay for one period after a trial's start: one trial, the whole budget, as before.
    alone = planned_schedule([slow], max_steps=400, eval_every_steps=50, time_budget=200.0, step_budget=None,
                             concurrency=1)
    assert alone.evaluations == 1 and "room" not in alone.notes[0] and "the budget" in alone.notes[0]
    assert START + alone.period_seconds == pytest.approx(200.0 * (1 - BUDGET_MARGIN))


def test_a_plan_with_one_trial_at_a_time_starts_more_than_the_baseline():
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    config = _config(time_budget_minutes=5, num_trials=10, max_steps=2000, exploit={"share": 0})

    def plan(concurrency: int):
        return plan_search(config, probes, validation_rows=80, test_rows=40, seq_len=64,
                                    concurrency=concurrency)

    one, two = plan(1), plan(2)
    assert one.num_trials >= 2 and one.simulated.started >= 2
    assert max(one.trial_seconds(c) for c in one.combinations) <= 300 / 2
    assert max(two.trial_seconds(c) for c in two.combinations) > 300 / 2, "two slots: a trial may fill the budget"


def test_no_combination_spends_more_than_half_a_period_evaluating():
    fast, slow_eval = times("fast", step=0.5, evaluation=5.0), times("slow-eval", step=1.0, evaluation=40.0)
    schedule = planned_schedule([fast, slow_eval], max_steps=2000, eval_every_steps=50, time_budget=600.0,
                                step_budget=None, concurrency=2)
    assert schedule.period_seconds == 80.0  # not fast's 30 s: slow-eval's 40 s evaluation would fill it
    assert schedule.evaluations == int((600 - START) // 80.0) and "twice the longest evaluation" in schedule.notes[0]


def test_a_step_budget_shortens_the_trials_to_what_it_pays_for():
    schedule = planned_schedule([times("a", 0.5, 5.0)], max_steps=400, eval_every_steps=50, time_budget=None,
                                step_budget=120, concurrency=2)
    assert schedule.evaluations == 2 and "step budget" in schedule.notes[0]


def _config(**search) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "planned", "data": {"path": "data.csv", "task": "classification", "splits": {"train": 100, "validation": 80, "test": 40}},
        "models": [{"name": "big", "path": "big"}, {"name": "small", "path": "small"}],
        "space": {"effective_batch_size": [16, 32], "precision": ["fp32"]},
        "search": {"num_trials": 10, "max_concurrent_trials": 2, "eval_every_steps": 50, "max_steps": 400,
                   **search},
        "export": {"quantization": ["int8"]},
    })


def _inputs(config: SweepConfig, probes: dict[str, ProbeResult]):
    return planning.plan_inputs(config, probes, validation_rows=80, test_rows=40, seq_len=64, concurrency=2)


def _plan(config: SweepConfig, probes: dict[str, ProbeResult]):
    return planning.search_plan(config, _inputs(config, probes))


def test_a_sweep_without_budget_keeps_its_length_and_trials_and_predicts_their_time():
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    plan = _plan(_config(), probes)
    assert (plan.max_steps, plan.num_trials) == (400, 10)
    assert plan.notes == ["dropout the checkpoint's own (auto: the passes over the training split are not known); "
                          "the baseline keeps the checkpoint's"]
    big = next(c for c in plan.combinations if c.key == "big")
    assert big.seconds_per_step == pytest.approx(24 / 24.0)  # the mean effective batch over the probed speed
    assert big.seconds_per_evaluation == pytest.approx(80 / 40.0)  # validation rows over the measured eval speed
    assert plan.trial_steps(big) == 400 and plan.trial_seconds(big) == pytest.approx(START + 8 * (50 + 2.0))
    assert 0 < plan.simulated.stopped_early < 10 and plan.simulated.completed >= 1
    assert plan.search_seconds < 10 * plan.trial_seconds(big) / 2  # ASHA stops some trials early, two run at once
    # Full precision and int8, each made, scoring 40 test rows at 40 rows/s and timed at that speed; the baseline's
    # checkpoint scored once beside them.
    int8 = export_time.VARIANT_SLOWDOWN["int8"]
    test_pass = (40 + WARM_UP_ROWS) / 40.0  # the test rows and the untimed warm-up's
    per_variant = test_pass + export_time.speed_pass_seconds(1 / 40.0, 64, "classification")
    baseline = export_time.EXPORT_FIXED_SECONDS + test_pass
    assert plan.export_seconds == pytest.approx(2 * export_time.EXPORT_FIXED_SECONDS + (1 + int8) * per_variant + baseline)
    # By step, as the export times them (its summary puts each beside the plan's).
    assert plan.export_steps == pytest.approx({"full": export_time.EXPORT_FIXED_SECONDS + per_variant,
                                               "baseline": baseline,
                                               "int8": export_time.EXPORT_FIXED_SECONDS + int8 * per_variant})
    assert plan.to_dict()["export_steps"] == plan.export_steps


def test_a_time_budget_allots_each_combination_the_same_seconds_and_counts_the_trials_that_start():
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0),
              "slowest": probe("big", "bf16", 2.0, too_slow="far slower")}  # left out: the probe gave up on it
    plan = _plan(_config(time_budget_minutes=5, num_trials=50, max_steps=2000, exploit={"share": 0}), probes)
    big, small = (next(c for c in plan.combinations if c.key == key) for key in ("big", "small"))
    assert [c.key for c in plan.combinations] == ["big", "small"]
    # small: 50 steps of 24 samples at 48/s and 80 rows at 40/s = 27 s; as many as fit after a trial's start,
    # stretched so that they fill the budget but its margin: the period of every trial.
    assert plan.evaluations == int((300 - START) // 27.0) == plan.max_steps // 50
    filled = 300 * (1 - BUDGET_MARGIN)
    assert plan.period_seconds == pytest.approx((filled - START) / plan.evaluations) and plan.period_seconds > 27.0
    period = plan.period_seconds
    assert plan.samples_per_evaluation == {"small": round((period - 2.0) * 48.0), "big": round((period - 2.0) * 24.0)}
    assert plan.trial_steps(big) < plan.trial_steps(small) <= 2000
    assert plan.trial_seconds(big) == pytest.approx(plan.trial_seconds(small))
    assert plan.trial_seconds(small) == pytest.approx(filled, abs=1)
    # Two slots for 300 s, a trial stopped at its first rung costing 37 s: never 50 trials.
    assert plan.num_trials < 50 and any("num_trials 50 ->" in note for note in plan.notes)
    assert 1 <= plan.simulated.started <= plan.num_trials
    assert plan.search_seconds == pytest.approx(planning.RAY_START_SECONDS + 300, abs=30)
    assert (plan.requested_max_steps, plan.requested_num_trials) == (2000, 50), "beside what the file asked"
    assert planning.SearchPlan.from_dict(plan.to_dict()) == plan, "a resume reads back the plan it recorded"


def test_the_winners_share_of_a_time_budget_is_not_the_trials_and_the_plan_shows_the_split():
    """search.exploit.share 0.4 of 5 minutes: the trials are planned in 180 s, the winner trains 120 s after them."""
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    config = _config(time_budget_minutes=5, num_trials=50, max_steps=2000, exploit={"share": 0.4}, scheduler="none")
    plan = _plan(config, probes)
    assert plan.trials_seconds == pytest.approx(180)
    small = next(c for c in plan.combinations if c.key == "small")
    assert plan.trial_seconds(small) == pytest.approx(180 * (1 - BUDGET_MARGIN), abs=1)
    assert plan.exploitation_seconds == pytest.approx(120)
    assert plan.search_seconds == pytest.approx(planning.RAY_START_SECONDS + plan.simulated.seconds + 120)
    assert plan.simulated.seconds <= 180
    split = plan.to_dict()
    assert split["exploitation_seconds"] == 120 and split["exploration_seconds"] == pytest.approx(
        plan.search_seconds - 120, abs=0.1)
    assert any("180 s for the trials, then 120 s for the winner" in note for note in plan.notes)
    assert _plan(_config(exploit={"share": 0.4}), probes).exploitation_seconds == 0, "no time budget: no share"


def test_an_auto_share_gives_the_winner_more_of_a_budget_that_pays_for_few_passes_over_the_training_rows():
    """Candidates at 24 and 48 samples/s a trial, two at once: 5 minutes pay for 7,200 samples of the slowest one."""
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    config = _config(time_budget_minutes=5, num_trials=50, max_steps=2000, eval_every_steps=10,  # a short first
                     exploit={"max_epochs": 2}, scheduler="none")  # evaluation: the trials' quarter has room for
    # it; the cap fixed; without ASHA the share is not lowered for configurations (leaving_configurations)
    assert config.search.exploit.share == "auto"

    def planned(train_rows: int):
        return plan_search(config, probes, validation_rows=80, test_rows=40, seq_len=64, concurrency=2,
                                    train_rows=train_rows)

    few, many, between = planned(7_200), planned(1_800), planned(2_880)  # 1, 4 and 2.5 passes
    # At 4 passes auto gives 0.4, lowered to what the winner's 2 passes need past its trial's samples (the test below)
    assert (few.exploit_share, many.exploit_share, between.exploit_share) == (0.75, 0.19, 0.57)
    assert any("share 0.19, auto: the budget pays for 4.0 passes over the 1,800 training rows at its slowest "
               "candidate's speed; lowered from 0.40" in note for note in many.notes), many.notes
    assert few.exploitation_seconds == pytest.approx(225) and planned(100_000).exploit_share == 0.75
    capped = planned(600)  # its trials train 1,200 samples or more: two passes over 600 rows before they end
    assert (capped.exploit_share, capped.exploitation_seconds) == (0.0, 0.0)
    assert any("search.exploit.share 0.40 -> 0: every trial trains" in note and "(search.exploit.max_epochs), so "
               "the trials take the whole budget" in note for note in capped.notes), capped.notes
    assert capped.trial_seconds(capped.combinations[0]) > many.trial_seconds(many.combinations[0]), \
        "the winner's seconds lengthen the trials"
    assert any("(search.exploit.share 0.75, auto: the budget pays for 1.0 passes over the 7,200 training rows at "
               "its slowest candidate's speed" in note for note in few.notes)
    assert planned(0).exploit_share == 0.4, "no training rows known: the unplanned default"
    assert any("ending at 2 passes over the 7,200 training rows if that comes first: search.exploit.max_epochs" in note
               for note in few.notes)
    assert not any("max_epochs" in note for note in planned(0).notes), "no rows known: no passes to name"
    assert few.trials_seconds == pytest.approx(75) and config.search.exploit.share == "auto", "the file as written"
    fixed = plan_search(_config(time_budget_minutes=5, exploit={"share": 0.2}), probes, validation_rows=80,
                                 test_rows=40, seq_len=64, concurrency=2, train_rows=21_600)
    assert fixed.exploit_share == 0.2, "a share the file sets is kept"

    def file_share(train_rows: int, **exploit):
        return plan_search(_config(time_budget_minutes=5, exploit={"share": 0.2, "max_epochs": 2, **exploit}),
                                    probes, validation_rows=80, test_rows=40, seq_len=64, concurrency=2,
                                    train_rows=train_rows).exploit_share
    assert file_share(600) == 0.0, "...but not where the trials make the winner's passes themselves"
    assert file_share(600, max_epochs=None) == file_share(600, start="scratch") == 0.2, \
        "no passes cap, or a refit from step 0: the winner's seconds buy training"


def test_a_winner_that_ends_at_its_passes_long_before_its_share_gives_the_rest_to_the_trials():
    """2,000 training rows, the slowest candidate 24 samples/s a trial: 5 minutes pay for 3.6 passes (auto: 0.45, 135 s
    for the winner), but the winner stops at 2 passes, a few hundred samples past its trial: 1.5 times those at 24
    samples/s and a trial's start. The share shrinks to that, and the trials' part grows."""
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}

    def planned(train_rows: int, **exploit):
        return plan_search(_config(time_budget_minutes=5, num_trials=50, max_steps=2000, eval_every_steps=10,
                                   exploit={"max_epochs": 2, **exploit}, scheduler="none"), probes, validation_rows=80,
                                    test_rows=40, seq_len=64, concurrency=2, train_rows=train_rows)

    sized, uncapped = planned(2_000), planned(2_000, max_epochs=None)
    assert uncapped.exploit_share == 0.45, "no passes cap: the auto share stands"
    slowest = next(c for c in sized.combinations if c.key == "big")
    note = next(note for note in sized.notes if "lowered from 0.45: the winner's further training ends at 2 passes "
                                                "over the 2,000 training rows (search.exploit.max_epochs)" in note)
    found = re.search(r"\), ([\d,]+) samples past the shortest trial's ([\d,]+), about", note)
    past, trial = (int(group.replace(",", "")) for group in found.groups())
    assert past + trial == 4_000 and 0 < past < 2_000
    needed = 1.5 * past / 24.0 + slowest.start_seconds
    assert needed <= sized.exploit_share * 300 < needed + 3 and sized.exploit_share < 0.45
    assert sized.trial_seconds(slowest) > uncapped.trial_seconds(slowest), "the winner's unusable seconds go to trials"
    assert planned(100_000).exploit_share == 0.75, "a winner the budget cannot train to its passes keeps its share"
    assert 0 < planned(2_000, share=0.2).exploit_share < 0.2, "a file's share is sized as well, as the cap's rule is"


def test_the_winners_share_leaves_the_trials_time_for_a_first_evaluation_of_the_slowest_candidate():
    """The slowest candidate: 2 s a step at the mean batch of 24, 5 steps and a 2-s evaluation, after a trial's
    start: 22 s, room for 1.5 times that (33 s). A share that leaves the trials less is lowered, and said."""
    probes = {"big": probe("big", "fp32", 12.0), "small": probe("small", "fp32", 48.0)}

    def planned(minutes: float, share):
        return _plan(_config(time_budget_minutes=minutes, eval_every_steps=5, max_steps=100,
                             exploit={"share": share}, scheduler="none"), probes)

    squeezed = planned(3, 0.9)
    assert squeezed.exploit_share == 0.81 and 180 * (1 - squeezed.exploit_share) >= 33
    assert any("share 0.81; lowered from 0.90 so that a trial of the slowest candidate starts and evaluates once"
               in note for note in squeezed.notes)
    assert planned(3, 0.5).exploit_share == 0.5, "a share that leaves room stands"
    assert planned(0.5, 0.5).exploit_share == 0.0, "a budget shorter than the room: every second to the trials"


def test_a_trial_takes_its_combinations_samples_per_evaluation_in_steps_of_its_own_batch():
    from finesweep.search.tuning.context import TrialContext, trial_length

    context = TrialContext(sweep={}, tokenized={}, label_names=None, micro_batches={}, eval_batches={},
                           tracking_uri="", experiment_id="", parent_run_id="", max_steps=400, eval_every_steps=50,
                           samples_per_evaluation={"big|fp32|full": 600})
    assert trial_length(context, "big|fp32|full", 16) == (8 * 38, 38)  # 600 / 16 = 37.5 -> 38
    assert trial_length(context, "big|fp32|full", 32) == (8 * 19, 19)
    assert trial_length(context, "small|fp32|full", 16) == (400, 50)  # not allotted: the plan's steps


def test_the_baseline_keeps_to_the_seconds_its_periods_are_allotted_by_its_own_clock():
    """The probe times the trials' recipe; the baseline's trains more (the word embeddings, the checkpoint's dropout)
    and on 2 AVX2 cores missed its second evaluation at the trials' end. Where the plan allots time, its trial ends
    by its periods' seconds (trainer/schedule.py), at its planned steps at most."""
    from finesweep.search.tuning.context import TrialContext, build_plan, planned_lengths
    from finesweep.spaces.space import BASELINE_KEY

    probes = {"big|fp32|full": probe("big", "fp32", 12.0), "small|fp32|full": probe("small", "fp32", 48.0)}
    config = _config(time_budget_minutes=5)
    plan = _plan(config, probes)
    assert plan.period_seconds, "a budget that cannot pay for every max_steps: the trials are allotted time"

    def context(fields: dict) -> TrialContext:
        return TrialContext(sweep=config.model_dump(mode="json"), tokenized={"big": "t"},
                            label_names=None, micro_batches={"big|fp32|full": 8}, eval_batches={}, tracking_uri="",
                            experiment_id="", parent_run_id="", **fields)

    allotted = context(planned_lengths(plan))
    sampled = {"model": "big", "precision": "fp32", "method": "full", "effective_batch_size": 16,
               "learning_rate": 1e-4, "warmup_ratio": 0.0, "weight_decay": 0.0}
    baseline = {**sampled, "effective_batch_size": 8, "learning_rate": 5e-5, BASELINE_KEY: True}
    before = time.time()
    told = build_plan(baseline, allotted, "out")
    periods = told.evaluations * plan.period_seconds
    assert told.evaluations == -(-told.max_steps // told.eval_every_steps) and told.last_step == told.max_steps
    assert before + periods <= told.finish_by <= time.time() + periods
    assert told.evaluation_seconds == plan.times("big|fp32|full").seconds_per_evaluation > 0
    assert build_plan(sampled, allotted, "out").finish_by is None, "a sampled trial trains its steps, as timed"
    assert build_plan(baseline, allotted, "out", resume_from="/ckpt").finish_by is None, "a restart: its steps"
    stepped = _plan(_config(), probes)
    assert planned_lengths(stepped)["period_seconds"] is None
    assert build_plan(baseline, context(planned_lengths(stepped)), "out").finish_by is None, "steps allotted: steps"


def test_eval_speed_not_measured_is_taken_as_a_forward_pass_faster_than_training():
    plan = _plan(_config(), {"big": probe("big", "fp32", 24.0, eval_per_second=None)})
    assert plan.combinations[0].eval_samples_per_second == pytest.approx(measured.FORWARD_SPEEDUP * 24.0)


def test_nothing_measured_gives_no_plan():
    assert _inputs(_config(), {"big": probe("big", "fp32", 24.0, too_slow="far slower")}) is None


def test_a_batch_padded_to_its_longest_row_is_timed_at_that_length_not_the_probes_full_one():
    lengths = {"p50": 30.0, "p95": 50.0, "p99": 60.0, "max": 100.0}
    assert padded_fraction(lengths, 1, 64) == pytest.approx(30 / 64)  # one row: the median
    assert padded_fraction(lengths, 19, 64) == pytest.approx(50 / 64)  # the longest of 19: the 95th pct
    assert padded_fraction(lengths, 99, 64) == pytest.approx(60 / 64)
    assert padded_fraction(lengths, 1000, 64) == 1.0  # rows past seq_len are truncated to it
    plain = _plan(_config(), {"big": probe("big", "fp32", 24.0)}).combinations[0]
    padded = plan_search(_config(), {"big": probe("big", "fp32", 24.0)}, validation_rows=80, test_rows=40,
                                  seq_len=64, concurrency=2, lengths={"big": lengths}).combinations[0]
    fraction = padded_fraction(lengths, 8, 64)  # the probe's micro-batch
    assert padded.samples_per_second == pytest.approx(plain.samples_per_second / fraction)


def test_batches_grouped_by_length_pad_to_the_mean_length_and_the_plan_counts_on_it():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.gamma(6.0, 6.0, 20_000).round() + 2, 64)
    stats = percentiles(lengths)
    assert [key for key, _ in ANCHORS] == list(stats)  # the plan reads every percentile the length report keeps

    def simulated(batch: int, megabatch: int) -> float:  # transformers' sampler: sort each megabatch, cut batches
        order = rng.permutation(len(lengths))[: len(lengths) // megabatch * megabatch]
        sorted_groups = np.sort(lengths[order].reshape(-1, megabatch), axis=1)
        return sorted_groups.reshape(-1, batch).max(axis=1).mean() / 64

    for batch, megabatch in [(8, 8), (8, 32), (16, 128), (8, length_grouped_megabatch(20_000, 8))]:
        sorted_rows = None if megabatch == batch else megabatch
        assert padded_fraction(stats, batch, 64, sorted_rows) == pytest.approx(simulated(batch, megabatch), rel=0.05)
    assert length_grouped_megabatch(20_000, 8) == 50 * 8  # at most 50 batches
    assert length_grouped_megabatch(500, 64) == 64  # a small split: one batch, no grouping gain
    grouped = padded_fraction(stats, 8, 64, length_grouped_megabatch(20_000, 8))
    assert grouped == pytest.approx(lengths.mean() / 64, rel=0.03)
    assert grouped < 0.8 * padded_fraction(stats, 8, 64)

    def plan(group_by_length: bool):
        config = _config()
        config = config.model_copy(update={"data": config.data.model_copy(update={"group_by_length": group_by_length})})
        return plan_search(config, {"big": probe("big", "fp32", 24.0)}, validation_rows=80, test_rows=40,
                                    seq_len=64, concurrency=2, lengths={"big": stats},
                                    train_rows=20_000).combinations[0]

    step_rows = 24  # the space's mean effective batch, 16 and 32
    assert plan(True).samples_per_second == pytest.approx(
        24.0 / padded_fraction(stats, 8, 64, length_grouped_megabatch(20_000, step_rows)))
    assert plan(False).samples_per_second == pytest.approx(24.0 / padded_fraction(stats, 8, 64))
    # The validation split is evaluated sorted by length either way (trainer/trial.py::by_length): 80 rows in
    # batches of 8 (the micro-batch, where the probe kept no eval batch) pad to about their own rows' length.
    sorted_split = padded_fraction(stats, 8, 64, 80)
    assert plan(True).eval_samples_per_second == plan(False).eval_samples_per_second == pytest.approx(
        40.0 / sorted_split)
    assert sorted_split < 0.8 * padded_fraction(stats, 8, 64)


def test_a_causal_lms_export_adds_its_generations_token_by_token():
    def export(samples: int) -> float:
        config = _config()
        config = config.model_copy(update={
            "data": config.data.model_copy(update={"task": Task.causal_lm}),
            "export": config.export.model_copy(update={"generation_samples": samples})})
        return export_seconds(config, [times("a", 1.0, 1.0)], test_rows=40, seq_len=64)

    # 16 answers of 32 new tokens in one batch: 32 steps of 16 rows, a row's step DECODE_TOKEN_COST tokens of a
    # forward pass at 1 row/s of 64 tokens and each more row 0.15 of it; once in full precision, once at int8's
    # slowdown, and once each by the baseline's checkpoint and the untuned base model (in full precision).
    step = export_time.DECODE_TOKEN_COST / 64
    per_variant = 32 * step * (1 + export_time.GENERATION_ROW_COST * 15)
    answering = 1 + export_time.VARIANT_SLOWDOWN["int8"] + 2
    assert export(16) - export(0) == pytest.approx(per_variant * answering)
    second_batch = 32 * step * (1 + export_time.GENERATION_ROW_COST * 3)
    assert export(20) - export(16) == pytest.approx(second_batch * answering), "four more answers: a batch of four"


def test_a_gguf_variant_adds_its_making_by_the_weights_and_its_answers_one_at_a_time():
    """llama.cpp's converter and quantizer take longer for more weights; llama.cpp answers one prompt at a time, each
    token at GGUF_DECODE_RATIO of full precision's measured decoding."""
    def export(quantization: list[str], samples: int, weight_bytes: int = 540_000_000) -> float:
        config = _config()
        config = SweepConfig.model_validate({**config.model_dump(mode="json"), "data": {
            **config.data.model_dump(mode="json"), "task": "causal_lm"}, "search": {
            **config.search.model_dump(mode="json"), "metric": "eval_loss", "mode": "min"}, "export": {
            **config.export.model_dump(mode="json"), "quantization": quantization, "generation_samples": samples}})
        combination = replace(times("big|fp32|full", 1.0, 1.0), decode_seconds_per_token=0.04,
                              weight_bytes=weight_bytes)
        return export_seconds(config, [combination], test_rows=40, seq_len=64)

    per_pass = export_time.pass_seconds([CombinationTimes("m", 1, 1, 1, 1, weight_bytes=540_000_000)])
    variant_alone = export(["gguf-q4_k_m"], 0) - export(["none"], 0)
    making = export_time.GGUF_MAKE_SECONDS + export_time.GGUF_MAKE_SECONDS_PER_GB * 0.54
    assert variant_alone > making + per_pass
    assert export(["gguf-q4_k_m"], 0, 2 * 540_000_000) - export(["none"], 0, 2 * 540_000_000) > variant_alone
    answers = (export(["gguf-q4_k_m"], 16) - export(["none"], 16)) - variant_alone
    assert answers == pytest.approx(16 * 32 * 0.04 * export_time.GGUF_DECODE_RATIO)


def test_the_probes_measured_decoding_prices_the_answers_the_slowest_fp32_candidate_first():
    """SmolLM2 on 2 cores decoded at 37.6 ms a token where DECODE_TOKEN_COST's formula said 8: measured wins."""
    config = _config()
    config = config.model_copy(update={"data": config.data.model_copy(update={"task": Task.causal_lm}),
                                       "export": config.export.model_copy(update={"quantization": []})})

    def answers_cost(*combinations: CombinationTimes) -> float:
        with_answers = export_seconds(config, list(combinations), test_rows=40, seq_len=64)
        none = config.model_copy(update={"export": config.export.model_copy(update={"generation_samples": 0})})
        return with_answers - export_seconds(none, list(combinations), test_rows=40, seq_len=64)

    def measured(key: str, decode: float) -> CombinationTimes:
        return replace(times(key, 1.0, 1.0), decode_seconds_per_token=decode)

    def generated(token_seconds: float) -> float:  # by the full model, the baseline's checkpoint and the base model
        return 3 * export_time.generation_seconds(config.export.generation_samples, 64 // 2, token_seconds)

    assert answers_cost(measured("a|fp32|full", 0.5)) == pytest.approx(generated(0.5))
    # Per model its fp32 decoding (bf16's is not what the export runs), then the slowest model's.
    assert answers_cost(measured("a|fp32|full", 0.5), measured("a|bf16|full", 2.0),
                        measured("b|fp32|lora", 0.8)) == pytest.approx(generated(0.8))
    assert answers_cost(times("a|fp32|full", 1.0, 1.0)) == pytest.approx(
        generated(export_time.DECODE_TOKEN_COST / 64)), "not measured (an older cache): the formula"


def test_an_export_on_a_gpu_machine_counts_the_cpu_timing_pass_of_every_variant():
    config = _config()  # full precision and int8
    on_cpu = export_seconds(config, [times("a", 1.0, 1.0)], test_rows=40, seq_len=64)
    on_gpu = export_seconds(config, [times("a", 1.0, 1.0)], test_rows=40, seq_len=64, timed_on_cpu_too=True)
    assert on_gpu - on_cpu == pytest.approx(2 * export_time.CPU_TIMING_SECONDS)


def test_the_exports_speed_passes_follow_the_measured_speed_within_their_timing_budget():
    """A fast model's passes cost a second; a slow one's stop once SPEED_SECONDS of each shape were timed."""
    fast = export_time.speed_pass_seconds(1 / 300.0, 64, "classification")
    slow = export_time.speed_pass_seconds(1 / 2.0, 64, "classification")
    assert fast < 1.5 < slow
    # each shape: one untimed pass, then timed passes until their sum reaches SPEED_SECONDS (the last may overrun)
    batch32 = 32 / 2.0
    assert slow <= 2 * (SPEED_SECONDS + 2 * batch32)
    llm = export_time.speed_pass_seconds(1 / 300.0, 64, "causal_lm")
    assert llm > fast  # decoding is timed too


def test_the_baseline_adds_one_test_pass_to_the_export_and_a_causal_lms_untuned_base_another():
    def export(task: str, baseline: str) -> float:
        config = _config(baseline=baseline)
        config = config.model_copy(update={"data": config.data.model_copy(update={"task": Task(task)}),
                                           "export": config.export.model_copy(update={"generation_samples": 0})})
        return export_seconds(config, [times("a", 1.0, 1.0)], test_rows=40, seq_len=64)

    one_pass = export_time.EXPORT_FIXED_SECONDS + (40 + WARM_UP_ROWS) / 1.0
    assert export("classification", "auto") - export("classification", "off") == pytest.approx(one_pass)
    assert export("causal_lm", "auto") - export("causal_lm", "off") == pytest.approx(2 * one_pass)


def test_each_export_pass_costs_more_for_a_larger_model_as_the_probe_counted_its_weights():
    """Loading, saving and registering grow with the weights: the largest candidate's (the winner may be any) sets
    each variant's and each reference pass's cost; an answer without a count (an older cache) keeps the flat one."""
    config = _config()  # full precision and int8, a baseline: three passes

    def export(*weight_bytes: int) -> float:
        combinations = [CombinationTimes(f"m{i}|fp32|full", 1.0, 1.0, 1.0, 1.0, weight_bytes=size)
                        for i, size in enumerate(weight_bytes)]
        return export_seconds(config, combinations, test_rows=40, seq_len=64)

    small, large = 90_000_000, 540_000_000
    assert export(small, large) == export(large) > export(small)
    grown = 3 * export_time.EXPORT_SECONDS_PER_GB * (large - small) / 1e9
    assert export(large) - export(small) == pytest.approx(grown)
    assert export(0) - export(small) == pytest.approx(
        3 * (export_time.EXPORT_FIXED_SECONDS - export_time.pass_seconds([CombinationTimes("m", 1, 1, 1, 1, 0, small)])))
    assert probe("m", "fp32", 8.0).weight_bytes == 0
    counted = probe("m", "fp32", 8.0)
    counted.attempts[0]["parameters"] = 1000
    assert counted.weight_bytes == 4000 and planning.combination_times(
        {"m": counted}, [8], validation_rows=80)[0].weight_bytes == 4000


def test_a_model_the_probe_took_long_to_load_starts_its_trials_later_and_fits_fewer_periods():
    """The probe's first attempt loads the model (on a GPU: CUDA's start, a 4-bit quantization): beyond what a small
    encoder takes, a trial's start pays it, and the trials' budget holds fewer periods after it."""
    quick, slow = probe("m", "fp32", 8.0), probe("m", "fp32", 8.0)
    quick.attempts[0]["load_seconds"], slow.attempts[0]["load_seconds"] = 0.5, 21.0
    [quick_times] = planning.combination_times({"m": quick}, [8], validation_rows=80)
    [slow_times] = planning.combination_times({"m": slow}, [8], validation_rows=80)
    assert quick_times.start_seconds == START and slow_times.start_seconds == pytest.approx(START + 20.0)
    assert probe("m", "fp32", 8.0).load_seconds == 0.0, "an older cache's answer: the fixed start"
    schedules = [planned_schedule([times], max_steps=1000, eval_every_steps=10, time_budget=100.0,
                                  step_budget=None, concurrency=2)
                 for times in (quick_times, slow_times)]
    period = quick_times.period_seconds(10)
    assert [s.evaluations for s in schedules] == [int((100 - START) // period), int((100 - START - 20) // period)]
    run = simulate([Lane(10.0, 10, start_seconds=30.0)], evaluations=2, num_trials=1, concurrency=1, milestones=None,
                   reduction_factor=2, time_budget=None, step_budget=None, seed=0)
    assert run.seconds == pytest.approx(30.0 + 2 * 10.0)


def test_a_cpu_export_scores_the_test_split_with_every_core_where_the_probe_timed_one_trials():
    """The test-split passes speed up with the export's threads over a trial's, up to EXPORT_THREADS_CAP; the fixed
    costs (saving, ONNX export, speed passes) do not."""
    config = _config()  # full precision and int8

    def scoring(ratio: float) -> float:
        fixed = export_seconds(config, [times("a", 1.0, 1.0)], test_rows=0, seq_len=64, thread_ratio=ratio)
        return export_seconds(config, [times("a", 1.0, 1.0)], test_rows=40, seq_len=64,
                                       thread_ratio=ratio) - fixed

    assert scoring(2.0) == pytest.approx(scoring(1.0) / 2)
    assert scoring(64.0) == pytest.approx(scoring(1.0) / export_time.EXPORT_THREADS_CAP)
    assert scoring(0.5) == pytest.approx(scoring(1.0))  # a trial with more threads than the export: no slow-down


def test_a_time_limit_gives_the_search_what_the_data_probe_and_export_leave():
    """search.time_limit 10m with 40 s gone on data and probe: the search's budget is the rest less the export's
    estimate and the command's overhead, and the plan says how the limit was divided."""
    from finesweep.search.budget import limit

    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    config = _config(time_limit="10m", num_trials=50, max_steps=2000)
    allowance = limit.within_limit(config, _inputs(config, probes), 600, elapsed=40)
    planned = planning.search_plan(config, _inputs(config, probes), allowance)
    export = planned.export_seconds
    assert config.search.time_limit == "10m" and config.search.time_budget_minutes is None, "the file stays as written"
    spare = limit.EXPORT_ESTIMATE_MARGIN * export + limit.LIMIT_OVERHEAD_SECONDS
    assert allowance.seconds == planned.budget_seconds == pytest.approx(600 - 40 - export - spare)
    division = allowance.division
    assert planned.notes[-1] == division and division.startswith("the time limit 10m (600 s) divided: data and probe 40 s, search ")
    assert f"export {export:.0f} s (predicted)" in division


def test_an_equal_time_baseline_is_planned_as_the_searchs_time_again_and_a_time_limit_pays_for_it():
    """search.baseline.budget equal: the plan shows the doubled cost before anything starts, and under a time limit
    the search gets half of what the data, the probe and the export leave, the other half the equal-time run."""
    from finesweep.search.budget import limit

    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    trial = _plan(_config(time_budget_minutes=6), probes)
    equal = _plan(_config(time_budget_minutes=6, baseline={"budget": "equal"}), probes)
    assert trial.equal_time_seconds == 0 and trial.to_dict()["equal_time_seconds"] == 0
    assert equal.search_seconds == pytest.approx(trial.search_seconds)
    assert equal.equal_time_seconds == pytest.approx(equal.search_seconds - planning.RAY_START_SECONDS + START)
    assert equal.predicted_seconds == pytest.approx(trial.predicted_seconds + equal.equal_time_seconds)
    assert any("search.baseline.budget: equal" in note for note in equal.notes)
    config = _config(time_limit="10m", num_trials=50, max_steps=2000, baseline={"budget": "equal"})
    allowance = limit.within_limit(config, _inputs(config, probes), 600, elapsed=40)
    planned = planning.search_plan(config, _inputs(config, probes), allowance)
    export, division = planned.export_seconds, allowance.division
    spare = limit.EXPORT_ESTIMATE_MARGIN * export + limit.LIMIT_OVERHEAD_SECONDS
    search = allowance.seconds
    assert search == pytest.approx((600 - 40 - export - spare - START) / 2)
    assert 40 + planned.predicted_seconds <= 600 - spare + planning.RAY_START_SECONDS + 1, "within the limit"
    assert f"search {search:.0f} s, and up to as long again for the baseline at equal time, export" in division


def test_a_run_that_ends_inside_its_limit_says_how_much_it_left_and_where_from():
    """The LLM example's first run under 10m ended after 540 s: its export took 82 s of the 110 s the rules
    predicted. The run's last lines say what was left and which phase came in under its plan."""
    from finesweep.search.budget import limit

    plan = {"time_limit_seconds": 600.0, "budget_seconds": 349.9, "export_seconds": 110.4}
    words = limit.unused_words(plan, {"data": 33.2, "probe": 59.1, "search": 359.4, "export": 81.6}, 539.7)
    spare = limit.EXPORT_ESTIMATE_MARGIN * 110.4 + limit.LIMIT_OVERHEAD_SECONDS
    assert words == ("60 s of the 600 s limit unused (10%): the search took 359 s of its 350 s budget, the export "
                     f"82 s of the 110 s predicted, and {spare:.0f} s were kept for Ray, the records, the exit and "
                     "the export estimate's error")
    assert limit.unused_words(plan, {}, 605.0) is None, "past the limit: nothing unused"
    assert limit.unused_words({"budget_seconds": 300.0}, {}, 100.0) is None, "no limit"


def test_a_time_limit_that_cannot_pay_for_one_trial_is_refused_before_training_with_what_would_fit():
    from finesweep.search.budget import limit
    from finesweep.spaces import SweepFileError

    probes = {"big": probe("big", "fp32", 24.0)}
    config = _config(time_limit="90s")
    with pytest.raises(SweepFileError) as refused:
        limit.within_limit(config, _inputs(config, probes), 90, elapsed=60)
    text = str(refused.value)
    assert text.startswith("search.time_limit 90s: the data and the probe took 60 s")
    needed = float(text.split("Raise the limit to at least ")[1].split("s,")[0])
    assert limit.within_limit(config, _inputs(config, probes), needed + 1, elapsed=60).seconds > 0, \
        "the limit the error names is enough"


@pytest.mark.parametrize("text,seconds", [("600s", 600), ("10m", 600), ("1.5h", 5400), (" 90 S ", 90)])
def test_durations_take_a_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10", "ten minutes", "-5m", "0s", "5d"])
def test_a_duration_without_a_known_unit_is_refused(text):
    with pytest.raises(ValueError, match="e.g. 600s, 10m or 1.5h"):
        parse_duration(text)


def test_a_time_limit_and_a_search_budget_are_one_setting_too_many():
    with pytest.raises(ValueError, match="set one of them"):
        _config(time_limit="10m", time_budget_minutes=5)


def test_the_export_scores_at_full_precisions_measured_speed_where_the_probe_timed_it():
    """The export saves and scores fp32: a bf16 trial's faster evaluation does not speed up its estimate."""
    config = _config(baseline="off")

    def combination(key: str, eval_speed: float) -> CombinationTimes:
        return CombinationTimes(key, samples_per_second=1.0, eval_samples_per_second=eval_speed, seconds_per_step=1.0,
                                seconds_per_evaluation=1.0)

    def scoring(*combinations: CombinationTimes) -> float:
        def export(rows: int) -> float:
            return export_seconds(config, list(combinations), test_rows=rows, seq_len=64)
        return export(400) - export(0)

    full, half = combination("a|fp32|full", 50.0), combination("a|bf16|full", 100.0)
    assert scoring(full, half) == pytest.approx(scoring(full))
    assert scoring(half) == pytest.approx(scoring(full) / 2)  # no fp32 measured: the fastest there is
    shallow = combination("b|fp32|full", 100.0)
    assert scoring(full, half, shallow) == pytest.approx(scoring(full)), "the slowest candidate's: it may win"


def test_an_auto_cadence_too_slow_for_two_evaluations_in_the_trials_share_is_lowered_and_said():
    """The plainly written LLM file: 50 steps between evaluations cost its slowest combination 434 s; under a time
    budget eval_every_steps auto comes down until a trial of the slowest evaluates twice in the trials' share (a
    number the file writes stands, 50 among them)."""
    probes = {"big": probe("big", "fp32", 2.0)}  # 12 s a step at the mean effective batch of 24, 2 s an evaluation
    plan = _plan(_config(time_budget_minutes=5, exploit={"share": 0.5}, eval_every_steps="auto"), probes)
    # The trials' 150 s: (150 - start) / 2 - 2 s of evaluation leaves room for a few 12 s steps, not 50.
    assert 1 <= plan.eval_every_steps < 50 and any("search.eval_every_steps auto ->" in n for n in plan.notes)
    big = plan.combinations[0]
    assert planning.TRIAL_START_SECONDS + 2 * big.period_seconds(plan.eval_every_steps) <= 150
    assert plan.evaluations == plan.max_steps // plan.eval_every_steps
    for written in (40, 50):
        kept = _plan(_config(time_budget_minutes=5, exploit={"share": 0.5}, eval_every_steps=written), probes)
        assert kept.eval_every_steps == written, "a number the file writes stands"
    roomy = _plan(_config(time_budget_minutes=500, exploit={"share": 0.5}, eval_every_steps="auto"), probes)
    assert roomy.eval_every_steps == 50 and not any("eval_every_steps" in n for n in roomy.notes)
    short = _plan(_config(max_steps=20, eval_every_steps="auto"), probes)
    assert short.eval_every_steps == 20, "auto: a trial's max_steps at most"


def test_the_plan_says_a_budget_as_written_or_in_seconds_where_a_time_limit_divided_it():
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    assert _plan(_config(time_budget_minutes=6.5), probes).budget == "6.5 minutes"
    assert _plan(_config(time_budget_minutes=302 / 60), probes).budget == "302 s"  # not "5.03333 minutes"


def test_auto_passes_make_twelve_thousand_samples_for_a_classifier_within_two_to_ten_and_two_for_a_causal_lm():
    """search.exploit.max_epochs auto: 6,000 tweets or more keep the measured 2 passes; 1,540 text pairs get 7.8 (6
    scored 8 points over 2 on test); a few hundred rows stop at 10; a causal LM keeps 2; a number is the file's."""
    from finesweep.spaces import Task
    from finesweep.spaces.search_config import ExploitConfig

    auto = ExploitConfig()
    assert auto.max_epochs == "auto"
    assert [auto.passes(rows, Task.classification) for rows in (20_000, 6_000, 1_540, 371, 0)] == \
        pytest.approx([2.0, 2.0, 12_000 / 1_540, 10.0, 2.0])
    assert auto.passes(1_540, Task.causal_lm) == 2.0
    assert ExploitConfig(max_epochs=3).passes(1_540, Task.classification) == 3
    assert ExploitConfig(max_epochs=None).passes(1_540, Task.classification) is None
    with pytest.raises(ValueError, match="max_epochs must be more than 0 passes"):
        ExploitConfig(max_epochs=0)
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    plan = plan_search(_config(time_budget_minutes=5, num_trials=50, max_steps=2000, eval_every_steps=10),
                                probes, validation_rows=80, test_rows=40, seq_len=64, concurrency=2, train_rows=2_000)
    assert any("ending at 6 passes over the 2,000 training rows if that comes first: search.exploit.max_epochs "
               "(auto: 12,000 samples, 2 to 10 passes)" in note for note in plan.notes), plan.notes


def test_the_onnx_graphs_writing_grows_with_the_weights_from_the_flat_seconds_of_a_small_encoder():
    """A 135M-parameter decoder classifier's ONNX export took 67 s where the flat 8 s of MiniLM's was planned."""
    config = _config()
    onnx_only = config.export.model_copy(update={"quantization": [Quantization("onnx-int8")]})
    config = config.model_copy(update={"export": onnx_only})

    def onnx_step(weight_bytes: int) -> float:
        combination = replace(times("m|fp32|full", 1.0, 1.0), weight_bytes=weight_bytes)
        return export_time.export_steps(config, [combination], test_rows=40, seq_len=64)["onnx-int8"]

    small, large = onnx_step(20_000_000), onnx_step(540_000_000)
    assert small - onnx_step(1) == pytest.approx(export_time.EXPORT_SECONDS_PER_GB * (0.02 - 1e-9))  # the flat floor
    writing = export_time.ONNX_EXPORT_SECONDS_PER_GB["classification"] * 0.54
    assert large - small == pytest.approx(writing - export_time.ONNX_EXPORT_SECONDS["classification"]
                                          + export_time.EXPORT_SECONDS_PER_GB * 0.52)


def test_a_resume_reads_the_plan_its_sweep_recorded_and_an_older_record_beside_its_planned_config():
    """A sweep recorded its plan in sweep-state.json (SearchPlan.to_dict): a resume goes on with it exactly. An older
    sweep wrote the plan's decisions into the config it saved and kept a record without them: they are read back from
    that config, with the record's allotted times."""
    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    config = _config(time_budget_minutes=5, num_trials=50, max_steps=2000)
    plan = _plan(config, probes)
    assert planning.recorded_plan(json.loads(json.dumps(plan.to_dict())), config) == plan
    older = {key: value for key, value in plan.to_dict().items()
             if key not in ("budget_seconds", "export", "auto_dropout", "elapsed_seconds", "time_limit_seconds")}
    planned_config = _config(time_budget_minutes=5, num_trials=plan.num_trials, max_steps=plan.max_steps,
                             exploit={"share": plan.exploit_share})
    read = planning.recorded_plan(older, planned_config)
    assert (read.max_steps, read.num_trials, read.eval_every_steps) == (plan.max_steps, plan.num_trials, 50)
    assert read.samples_per_evaluation == plan.samples_per_evaluation and read.budget_seconds == 300
    assert read.exploitation_seconds == plan.exploitation_seconds
    assert {c.key: c.samples_per_second for c in read.combinations} == {c.key: c.samples_per_second
                                                                       for c in plan.combinations}
