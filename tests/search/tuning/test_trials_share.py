"""The trials' share of the time budget ends the search only once some trial has evaluated (at the whole search
budget at the latest), and a resumed sweep keeps the seconds it had spent."""

from __future__ import annotations

from dataclasses import replace

import pickle

import pytest
from ray.tune.search import Searcher

from finesweep.search.budget.plan import CombinationTimes, unplanned
from finesweep.search.selection.best import SINCE_BEST
from finesweep.search.tuning import callbacks
from finesweep.search.tuning.callbacks import StepBudgetStopper, TrialsShareStopper
from finesweep.search.budget.pace import TrialTimes, planned_times
from finesweep.search.tuning.trials_share import CUT_BY_SHARE, SHARE_LEDGER, ShareState, TrialStartGate
from finesweep.search.tuning.tuner import stoppers
from finesweep.spaces import SweepConfig


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "time", clock)
    return clock


def _checked_at(stopper: TrialsShareStopper, clock: Clock, *seconds: float) -> list[bool]:
    """stop_all's answers at these seconds after its first call (Tune calls it at every step of its loop)."""
    start, answers = clock.now, []
    for at in seconds:
        clock.now = start + at
        answers.append(stopper.stop_all())
    return answers


def test_the_share_ends_at_its_seconds_once_a_trial_has_evaluated(clock):
    stopper = TrialsShareStopper(60, 100)
    assert stopper("a", {"eval_loss": 1.0, "step": 5}) is False  # single trials are ASHA's to stop
    assert _checked_at(stopper, clock, 0, 30, 59.9, 60) == [False, False, False, True]


def test_trials_that_have_not_evaluated_go_on_past_the_share_until_the_first_evaluation(clock):
    """The quickstart on a busy machine: both trials were stopped at the share before evaluating, nothing to export."""
    stopper = TrialsShareStopper(60, 100)
    assert _checked_at(stopper, clock, 0, 60, 80) == [False, False, False]
    stopper("b", {"eval_loss": 1.2, "step": 5})
    assert stopper.stop_all(), "past the share, the first evaluation ends it"


def test_without_any_evaluation_the_whole_search_budget_ends_it(clock):
    stopper = TrialsShareStopper(60, 100)
    assert _checked_at(stopper, clock, 0, 99, 100) == [False, False, True]


def test_a_resumed_sweep_keeps_the_seconds_spent_and_not_the_downtime(clock):
    stopper = TrialsShareStopper(60, 100)
    _checked_at(stopper, clock, 0, 40)
    stopper("a", {"eval_loss": 1.0})
    resumed = pickle.loads(pickle.dumps(stopper))  # Tune's experiment state, read back by `finesweep resume`
    clock.now += 3600  # the machine was down for an hour
    assert resumed.spent == pytest.approx(40) and resumed.evaluated
    assert _checked_at(resumed, clock, 0, 19) == [False, False]
    assert _checked_at(resumed, clock, 1) == [True]


def _config(**search) -> SweepConfig:
    return SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "x"}],
                                       "search": search})


def _stoppers(config: SweepConfig, experiment):
    return stoppers(config, unplanned(config, 1), experiment)


def test_the_search_is_ended_by_whichever_budget_it_has(tmp_path):
    timed = _stoppers(_config(time_budget_minutes=5, exploit={"share": 0.4}, plateau_patience=None), tmp_path)
    assert isinstance(timed, TrialsShareStopper) and (timed.seconds, timed.longest) == (180, 300)
    stepped = _stoppers(_config(time_budget_minutes=None, step_budget=100, plateau_patience=None), tmp_path)
    assert isinstance(stepped, StepBudgetStopper)
    every = _stoppers(_config(time_budget_minutes=5, step_budget=100), tmp_path)  # and a trial's plateau (the default)
    assert not every.stop_all()
    assert every("a", {"eval_loss": 1.0, "step": 100, SINCE_BEST: 3}), "a trial's third evaluation without a better"
    assert every.stop_all(), "the step budget, spent long before the time budget"


class _Ended:
    def __init__(self, error: Exception | None = None):
        self.error = error


def test_a_search_with_nothing_to_export_says_why_and_what_to_change():
    """The QLoRA example on a busy GPU machine: its one trial started too slowly to evaluate in 1.5 minutes, and the
    sweep said only "see the failed trials above" (there were none)."""
    def reason(config: SweepConfig, results: list) -> str:
        return callbacks.no_evaluation_reason(unplanned(config, 1), results)

    budget = reason(_config(time_budget_minutes=1.5, eval_every_steps=5), [_Ended()])
    assert "1 trial(s) were stopped by the time budget (1.5 minutes)" in budget and "failed" not in budget
    assert "search.time_budget_minutes" in budget and "(every 5 steps, search.eval_every_steps)" in budget
    both = reason(_config(time_budget_minutes=2), [_Ended(RuntimeError("x")), _Ended()])
    assert both.startswith("No trial reported") and "1 trial(s) failed" in both and "1 trial(s) were stopped" in both
    failed = reason(_config(), [_Ended(RuntimeError("x"))])
    assert "failed" in failed and "stopped" not in failed


# A trial's next evaluation against the share's end, and the gate that starts no trial too late (trials_share.py).
TIMES = {"m|fp32|full": TrialTimes(start=10.0, period=30.0), "m|fp32|lora": TrialTimes(start=10.0, period=60.0)}
FULL, LORA = ({"model": "m", "precision": "fp32", "method": method} for method in ("full", "lora"))


def _result(config: dict, iteration: int, seconds: float, step: int = 0) -> dict:
    return {"config": config, "training_iteration": iteration, "time_this_iter_s": seconds, "step": step,
            "eval_loss": 1.0}


def test_the_plans_times_per_combination_are_its_start_and_period():
    """10 steps of 2 s and a 10 s evaluation: a 30 s period after a 10 s start."""
    unmeasured = unplanned(_config(max_steps=30, eval_every_steps=10), 1)
    plan = replace(unmeasured, combinations=[CombinationTimes("m|fp32|full", 8.0, 8.0, 2.0, 10.0, start_seconds=10.0)])
    assert planned_times(plan) == {"m|fp32|full": TrialTimes(10.0, 30.0)}
    assert planned_times(unmeasured) == {}


def test_a_trial_whose_next_evaluation_would_pass_the_share_ends_at_the_one_it_made(clock, tmp_path):
    """The LLM example at 20 minutes: the last trials' periods were cut off by the share, unused."""
    stopper = TrialsShareStopper(100, 200, tmp_path / SHARE_LEDGER, TIMES)
    _checked_at(stopper, clock, 0, 50)
    assert stopper("a", _result(FULL, 2, 30.0)) is False, "50 + 30 fits in the 100 s"
    clock.now += 25
    cut = _result(FULL, 3, 30.0, step=30)
    assert stopper("a", cut) is True, "75 + 30 does not"
    assert cut[CUT_BY_SHARE] is True
    ended = {**_result(FULL, 3, 30.0, step=30), "done": True}  # Tune's last word on a trial that ended by itself
    assert stopper("b", ended) is False and CUT_BY_SHARE not in ended
    assert ShareState.read(tmp_path / SHARE_LEDGER) == ShareState(100, pytest.approx(75), 1.0)


def test_a_first_evaluation_counts_its_period_without_the_trials_start(clock):
    stopper = TrialsShareStopper(100, 200, None, TIMES)
    _checked_at(stopper, clock, 0, 65)
    assert stopper("a", _result(FULL, 1, 45.0)) is False, "its period is 35 s (45 less the planned 10 s start)"
    assert stopper("b", _result(FULL, 1, 50.0)) is True
    assert stopper("c", _result({"model": "other"}, 1, 500.0)) is False, "a combination the plan has not timed"
    assert stopper("d", {"eval_loss": 1.0}) is False, "no time: no judgement"


def test_the_trials_pace_against_the_plan_is_what_the_gate_scales_by(clock, tmp_path):
    stopper = TrialsShareStopper(1000, 2000, tmp_path / SHARE_LEDGER, TIMES)
    stopper.stop_all()
    stopper("a", _result(FULL, 2, 45.0))  # 1.5 times the plan's 30 s
    stopper("b", _result(LORA, 3, 30.0))  # half the plan's 60 s
    stopper("c", _result(LORA, 1, 600.0))  # a first period: its start is only estimated, so not a pace
    assert ShareState.read(tmp_path / SHARE_LEDGER).pace == pytest.approx(1.0)
    stopper("b", _result(LORA, 4, 90.0))
    assert ShareState.read(tmp_path / SHARE_LEDGER).pace == pytest.approx(1.5), "each trial's latest period"


def test_a_resumed_share_reads_the_ledger_when_it_is_further_on(clock, tmp_path):
    stopper = TrialsShareStopper(100, 200, tmp_path / SHARE_LEDGER, TIMES)
    saved = pickle.dumps(stopper)  # Tune's experiment state, saved before the last seconds
    _checked_at(stopper, clock, 0, 40, 40.5, 41)
    assert ShareState.read(tmp_path / SHARE_LEDGER).spent == pytest.approx(41), "written once a second"
    assert pickle.loads(saved).spent == pytest.approx(41)
    old = TrialsShareStopper(100, 200)
    old.__dict__ = {name: old.__dict__[name] for name in ("seconds", "longest", "spent", "evaluated", "_last_check")}
    resumed = pickle.loads(pickle.dumps(old))  # a stopper pickled before the ledger existed
    assert resumed("a", _result(FULL, 2, 30.0)) is False and not resumed.stop_all()


class _Searcher(Searcher):
    """Draws `configs` in turn and counts what it was asked."""

    def __init__(self, *configs: dict):
        super().__init__(metric="eval_loss", mode="min")
        self.configs, self.asked = list(configs), 0

    def suggest(self, trial_id: str) -> dict:
        self.asked += 1
        return self.configs.pop(0)


def test_the_gate_starts_no_trial_that_could_not_evaluate_inside_the_share(tmp_path):
    ledger = tmp_path / SHARE_LEDGER
    inner = _Searcher(FULL, FULL)
    gate = TrialStartGate(inner, ledger, TIMES)
    assert gate.suggest("t1") == FULL, "nothing spent yet"
    ShareState(100, 55).write(ledger)
    assert gate.suggest("t2") == FULL, "full's 40 s to a first evaluation, 45 left"
    ShareState(100, 65).write(ledger)
    assert gate.suggest("t3") == Searcher.FINISHED, "35 s left: no combination evaluates"
    assert inner.asked == 2, "the searcher is not asked for a trial that no combination could evaluate"
    ShareState(100, 40, pace=2.0).write(ledger)
    assert TrialStartGate(_Searcher(FULL), ledger, TIMES).suggest("t4") == Searcher.FINISHED, "at twice the plan's"
    drawn = _Searcher(LORA)
    ShareState(100, 40).write(ledger)
    assert TrialStartGate(drawn, ledger, TIMES).suggest("t5") == Searcher.FINISHED, "LoRA's 70 s, 60 left"
    assert drawn.asked == 1
    assert TrialStartGate(_Searcher(LORA), ledger, {}).suggest("t6") == LORA, "without the plan's times: no judgement"
