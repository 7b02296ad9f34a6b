"""A run that must end by a deadline times itself and re-draws its linear decay to end there (trainer/schedule.py).

The clock is simulated (a second per step, three per evaluation), so the end is exact; the scheduler and optimizer are
torch's and transformers' own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from transformers import TrainerControl, TrainerState, get_linear_schedule_with_warmup

from finesweep.trainer.schedule import OVERSHOOT, SKIPPED_BEFORE_LAST, FinishByDeadline, steps_that_fit

STEP_SECONDS, EVAL_SECONDS, EVERY = 1.0, 3.0, 10


@dataclass
class Args:
    max_steps: int
    eval_steps: int = EVERY
    warmup_steps: int = 0
    save_steps: int = EVERY
    logging_steps: int = 1


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _scheduler(total: int, warmup: int = 0, lr: float = 1e-3):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return get_linear_schedule_with_warmup(optimizer, warmup, total)


def _run(callback: FinishByDeadline, scheduler, args: Args, clock: Clock, start_step: int = 0):
    """The Trainer's loop as it calls a callback: returns (the step it stopped at, the rate used at each step)."""
    state, control = TrainerState(global_step=start_step), TrainerControl()
    callback.on_train_begin(args, state, control, lr_scheduler=scheduler)
    rates = []
    while not control.should_training_stop:
        rates.append(scheduler.get_last_lr()[0])
        clock.now += STEP_SECONDS
        scheduler.optimizer.step()  # the Trainer's order: the optimizer's step, then the scheduler's
        scheduler.step()
        state.global_step += 1
        control = TrainerControl()
        if state.global_step % state.eval_steps == 0:
            control.should_evaluate = True  # what transformers' DefaultFlowCallback sets before ours runs
        callback.on_step_end(args, state, control, lr_scheduler=scheduler)
        if control.should_evaluate:
            clock.now += EVAL_SECONDS
            callback.on_save(args, state, control)
        assert state.global_step < args.max_steps, "never past the Trainer's bound"
    return state.global_step, rates


def test_the_steps_that_fit_pay_for_the_evaluations_at_every_multiple_and_the_last_one():
    # From step 0, 100 s: 7 periods of 10 steps and their evaluations (91 s), then 6 steps and a last evaluation.
    assert steps_that_fit(100, STEP_SECONDS, EVAL_SECONDS, EVERY) == 76
    # From step 75: 5 steps to the next multiple and its evaluation (8 s), then as from step 80 with 92 s.
    assert steps_that_fit(100, STEP_SECONDS, EVAL_SECONDS, EVERY, step=75) == 5 + 70
    assert steps_that_fit(13, STEP_SECONDS, EVAL_SECONDS, EVERY) == 10, "its last step's evaluation is the period's"
    assert steps_that_fit(3.5, STEP_SECONDS, EVAL_SECONDS, EVERY) == 0


@pytest.mark.parametrize("estimate", [0.5, 1.0, 3.0], ids=["underestimated", "right", "overestimated"])
def test_a_run_ends_by_its_deadline_with_its_rate_decayed_to_zero(estimate):
    """Whether the provisional end was too short or too long, the run ends in time, its rate continuous and falling
    to zero at its last step."""
    clock, seconds = Clock(), 300.0
    deadline = clock.now + seconds
    fitting = steps_that_fit(seconds, STEP_SECONDS, EVAL_SECONDS, EVERY)
    args = Args(max_steps=int(fitting * estimate) * OVERSHOOT)
    scheduler = _scheduler(args.max_steps)
    end, rates = _run(FinishByDeadline(deadline, EVAL_SECONDS, clock=clock), scheduler, args, clock)
    assert clock.now <= deadline, "the last step and its evaluation end by the deadline"
    assert end >= fitting - EVERY, f"it stopped at {end}, though {fitting} steps fit"
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12), "the decay ends at zero"
    falls = [later - earlier for earlier, later in zip(rates, rates[1:])]
    assert max(falls) <= 1e-12, "the rate never rises again once it decays"
    assert -min(falls) < 0.2 * rates[0], "no jump: each re-draw starts from the current rate"


def test_a_continuation_restarts_the_finished_schedule_where_a_longer_run_would_be():
    """The winner's checkpoint ended its schedule (rate 0 at step 200); continued with a provisional end of 600 steps,
    its rate restarts at (600 - 200) / 600 of the base rate."""
    clock = Clock()
    scheduler = _scheduler(200)
    for _ in range(200):
        scheduler.optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == 0.0
    args = Args(max_steps=600 * OVERSHOOT)
    callback = FinishByDeadline(clock.now + 10_000, EVAL_SECONDS, restart=True, clock=clock)
    callback.on_train_begin(args, TrainerState(global_step=200), TrainerControl(), lr_scheduler=scheduler)
    assert scheduler.get_last_lr()[0] == pytest.approx(1e-3 * 400 / 600)
    assert scheduler.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 400 / 600), "the next step's rate too"


def test_a_resumed_run_goes_on_from_its_own_rate():
    """A run restored from its own checkpoint (not a restart) keeps the rate its scheduler had."""
    clock = Clock()
    scheduler = _scheduler(1000)
    for _ in range(300):
        scheduler.optimizer.step()
        scheduler.step()
    before = scheduler.get_last_lr()[0]
    callback = FinishByDeadline(clock.now + 100, EVAL_SECONDS, clock=clock)
    end, rates = _run(callback, scheduler, Args(max_steps=1000 * OVERSHOOT), clock, start_step=300)
    assert rates[0] == pytest.approx(before)
    assert 300 < end <= 300 + 100


def test_a_run_from_step_0_warms_up_as_planned_before_its_decay_is_redrawn():
    clock = Clock()
    args = Args(max_steps=400 * OVERSHOOT, warmup_steps=20)
    scheduler = _scheduler(args.max_steps, warmup=20)
    _, rates = _run(FinishByDeadline(clock.now + 200, EVAL_SECONDS, clock=clock), scheduler, args, clock)
    assert rates[:21] == sorted(rates[:21]) and rates[20] == pytest.approx(1e-3), "the warm-up rises to the base rate"
    assert rates[-1] < rates[20] and scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


def test_a_deadline_already_past_stops_at_the_first_step():
    clock = Clock()
    end, _ = _run(FinishByDeadline(clock.now - 1, EVAL_SECONDS, clock=clock), _scheduler(100),
                  Args(max_steps=100 * OVERSHOOT), clock)
    assert end == 1


def test_a_run_started_late_keeps_its_last_evaluation_inside_the_deadline_before_it_has_timed_a_step():
    """A start-up that left a few steps' seconds (a resume under load): the run has not timed MIN_TIMED_STEPS, so it
    has no estimate of its end yet; it still stops where its last evaluation ends by the deadline."""
    clock = Clock()
    deadline = clock.now + EVAL_SECONDS + 1.5 * STEP_SECONDS
    end, _ = _run(FinishByDeadline(deadline, EVAL_SECONDS, clock=clock), _scheduler(100),
                  Args(max_steps=100 * OVERSHOOT), clock)
    assert end == 1 and clock.now <= deadline


def test_a_continuation_evaluates_at_its_own_cadence_not_the_one_its_checkpoint_recorded():
    """A resumed Trainer reloads eval_steps and save_steps from the checkpoint's state (the trial's, every 10 steps);
    the continuation evaluates every 40, as its own arguments say."""
    clock, every = Clock(), 40
    callback = FinishByDeadline(clock.now + 10_000, EVAL_SECONDS, restart=True, clock=clock)
    state = TrainerState(global_step=200, eval_steps=EVERY, save_steps=EVERY, logging_steps=2)
    callback.on_train_begin(Args(max_steps=600 * OVERSHOOT, eval_steps=every, save_steps=every), state,
                            TrainerControl(), lr_scheduler=_scheduler(200))
    assert (state.eval_steps, state.save_steps, state.logging_steps) == (every, every, 1)


class Evaluations(FinishByDeadline):
    """FinishByDeadline that records the steps it evaluated at (the Trainer saves after each, then calls on_save)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: list[int] = []

    def on_save(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)
        super().on_save(args, state, control, **kwargs)


def test_an_evaluation_just_before_the_last_one_is_skipped_and_its_seconds_trained_in():
    """96 s pay for 72 steps with evaluations at 10 to 70 and the last one: the one at 70, two steps before the last,
    is skipped, and the 3 s it would have cost train three more steps."""
    clock = Clock()
    deadline = clock.now + 96
    assert steps_that_fit(96, STEP_SECONDS, EVAL_SECONDS, EVERY) == 72
    assert 72 - 70 < SKIPPED_BEFORE_LAST * EVERY
    callback = Evaluations(deadline, EVAL_SECONDS, clock=clock)
    end, _ = _run(callback, _scheduler(400 * OVERSHOOT), Args(max_steps=400 * OVERSHOOT), clock)
    assert callback.steps == [10, 20, 30, 40, 50, 60, end], callback.steps
    assert end == 75 and clock.now <= deadline


@pytest.mark.parametrize("evaluations", [0, 3], ids=["the period as told", "three spaced over the timed length"])
def test_evaluations_are_spaced_over_the_length_the_run_timed(evaluations):
    """Told a period of 10 steps, from a speed a third of its own, a run of 300 s asked for 3 evaluations spaces them
    over the steps it timed (about 90 apart) and trains the seconds the others would have cost; told 0, it keeps 10."""
    clock = Clock()
    deadline = clock.now + 300
    callback = Evaluations(deadline, EVAL_SECONDS, clock=clock, evaluations=evaluations)
    end, _ = _run(callback, _scheduler(100 * OVERSHOOT), Args(max_steps=100 * OVERSHOOT), clock)
    assert clock.now <= deadline and callback.steps[-1] == end
    if evaluations:
        assert len(callback.steps) == evaluations and callback.steps[0] > 80, callback.steps
        assert end > steps_that_fit(300, STEP_SECONDS, EVAL_SECONDS, EVERY), "the evaluations' seconds trained in"
    else:
        assert callback.steps[:3] == [10, 20, 30] and len(callback.steps) > 20


@pytest.mark.parametrize("start", [0, 7, 345, 1003])
@pytest.mark.parametrize("evaluations", [1, 2, 3, 5])
def test_a_run_from_any_step_makes_as_many_evaluations_as_it_is_told(start, evaluations):
    """The Trainer evaluates at multiples of the period counted from step 0; a continuation starts wherever its source
    trial stopped. Whatever the offset, the count is the one asked for, the last step's included."""
    clock = Clock()
    callback = Evaluations(clock.now + 400, EVAL_SECONDS, clock=clock, evaluations=evaluations)
    end, _ = _run(callback, _scheduler(100 * OVERSHOOT), Args(max_steps=(start + 100) * OVERSHOOT), clock,
                  start_step=start)
    assert len(callback.steps) == evaluations and callback.steps[-1] == end, callback.steps


@pytest.mark.parametrize("start", [0, 40])
def test_a_run_told_a_last_step_ends_there_when_its_deadline_is_later(start):
    """300 s pay for about 225 steps; told to end at step 120 (search.exploit.max_epochs), the run ends there, its rate
    decayed to zero at that step and its three evaluations spaced up to it, with most of its time unspent."""
    clock = Clock()
    deadline = clock.now + 300
    callback = Evaluations(deadline, EVAL_SECONDS, restart=bool(start), clock=clock, evaluations=3, last_step=120)
    scheduler = _scheduler(200 * OVERSHOOT)
    for _ in range(start):  # a checkpoint's scheduler has counted its steps
        scheduler.optimizer.step()
        scheduler.step()
    end, rates = _run(callback, scheduler, Args(max_steps=200 * OVERSHOOT), clock, start_step=start)
    assert end == 120 and callback.steps[-1] == 120 and len(callback.steps) == 3, callback.steps
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)
    assert rates[-1] <= 1.5 * rates[0] / (120 - start), "the decay reaches zero at the last step, not at the deadline"
    assert deadline - clock.now > 100, "the time the budget would have paid for is left unspent"
