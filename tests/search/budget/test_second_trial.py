"""A plan that starts one trial searches nothing: it says so before anything trains, with the budget that would
start a second one (search/budget/plan.py)."""

from __future__ import annotations

import re

from finesweep.search.budget import plan as planning
from finesweep.search.budget.plan import one_trial_warning
from finesweep.search.probe.table import ProbeResult
from finesweep.spaces import SweepConfig


def _probe(model: str) -> ProbeResult:
    attempts = [{"batch": 8, "peak_bytes": 1, "seconds_per_step": 8 / 2.0, "steps": 3},
                {"batch": 16, "peak_bytes": 1, "seconds_per_step": 16 / 8.0, "steps": 1, "mode": "eval"}]
    return ProbeResult(model=model, precision="fp32", method="full", seq_len=64, device="cpu", budget_bytes=2**30,
                       max_micro_batch=8, attempts=attempts, best_micro_batch=8, micro_batch=8)


def _config(minutes: float, **search) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "slow", "data": {"path": "data.csv", "task": "classification",
                                 "splits": {"train": 400, "validation": 80, "test": 40}},
        "models": [{"name": "slow", "path": "slow"}], "space": {"effective_batch_size": [8], "precision": ["fp32"]},
        "search": {"num_trials": 6, "max_concurrent_trials": 1, "eval_every_steps": 10, "max_steps": 200,
                   "time_budget_minutes": minutes, "scheduler": "none", **search}})  # ASHA's shorter periods
    # would start more (schedule.configurations_first): without it a trial fills its room, as the rule assumes


def _inputs(config: SweepConfig):
    return planning.plan_inputs(config, {"slow": _probe("slow")}, validation_rows=80, test_rows=40, seq_len=64,
                                concurrency=1, train_rows=400)


def _plan_for(config: SweepConfig):
    return planning.search_plan(config, _inputs(config))


def test_a_budget_for_one_trial_says_the_search_compares_nothing_and_what_would_pay_for_a_second():
    # 2 samples/s: 10 steps of 8 and an evaluation of 80 rows at 8/s take 50 s; the trials' 90 s of 2 minutes pay
    # for one such period after a trial's start, not two, so the baseline alone trains.
    config = _config(2)
    plan = _plan_for(config)
    assert plan.num_trials == 1
    warning = one_trial_warning(config, _inputs(config), plan)
    assert warning.startswith("the budget pays for one trial, the baseline's (search.baseline), so the search "
                              "compares nothing and the export is the recipe a user would run, trained further. About ")
    minutes = float(re.search(r"search.time_budget_minutes ([0-9.]+)", warning).group(1))
    assert _plan_for(_config(minutes)).num_trials >= 2, "the budget it names starts a second trial"
    assert _plan_for(_config(minutes / 1.1 ** 2)).num_trials == 1, "and about the least that does"
    assert f"search.exploit.share, now {plan.exploit_share:.2f}" in warning
    without = _config(2, baseline="off")
    assert "one trial, the space's centre, so the search compares nothing." in one_trial_warning(
        without, _inputs(without), _plan_for(without))


def test_no_warning_where_a_second_trial_starts_or_the_file_asks_for_one():
    roomy = _config(30)
    assert _plan_for(roomy).num_trials >= 2 and one_trial_warning(roomy, _inputs(roomy), _plan_for(roomy)) is None
    single = _config(2, num_trials=1)
    assert one_trial_warning(single, _inputs(single), _plan_for(single)) is None, "one trial is what the file asked for"
