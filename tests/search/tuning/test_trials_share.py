"""The trials' share of the time budget ends the search only once some trial has evaluated (at the whole search
budget at the latest), and a resumed sweep keeps the seconds it had spent."""

from __future__ import annotations

import pickle

import pytest

from finesweep.search.selection.best import SINCE_BEST
from finesweep.search.tuning import callbacks
from finesweep.search.tuning.callbacks import StepBudgetStopper, TrialsShareStopper
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


def test_the_search_is_ended_by_whichever_budget_it_has(tmp_path):
    timed = stoppers(_config(time_budget_minutes=5, exploit={"share": 0.4}, plateau_patience=None), tmp_path)
    assert isinstance(timed, TrialsShareStopper) and (timed.seconds, timed.longest) == (180, 300)
    stepped = stoppers(_config(time_budget_minutes=None, step_budget=100, plateau_patience=None), tmp_path)
    assert isinstance(stepped, StepBudgetStopper)
    every = stoppers(_config(time_budget_minutes=5, step_budget=100), tmp_path)  # and a trial's plateau (the default)
    assert not every.stop_all()
    assert every("a", {"eval_loss": 1.0, "step": 100, SINCE_BEST: 3}), "a trial's third evaluation without a better"
    assert every.stop_all(), "the step budget, spent long before the time budget"


class _Ended:
    def __init__(self, error: Exception | None = None):
        self.error = error


def test_a_search_with_nothing_to_export_says_why_and_what_to_change():
    """The QLoRA example on a busy GPU machine: its one trial started too slowly to evaluate in 1.5 minutes, and the
    sweep said only "see the failed trials above" (there were none)."""
    budget = callbacks.no_evaluation_reason(_config(time_budget_minutes=1.5, eval_every_steps=5), [_Ended()])
    assert "1 trial(s) were stopped by the time budget (1.5 minutes)" in budget and "failed" not in budget
    assert "search.time_budget_minutes" in budget and "search.eval_every_steps 5" in budget
    both = callbacks.no_evaluation_reason(_config(time_budget_minutes=2), [_Ended(RuntimeError("x")), _Ended()])
    assert both.startswith("No trial reported") and "1 trial(s) failed" in both and "1 trial(s) were stopped" in both
    failed = callbacks.no_evaluation_reason(_config(), [_Ended(RuntimeError("x"))])
    assert "failed" in failed and "stopped" not in failed
