"""A training run that must end by a wall-clock deadline (the winner trained further after the search).

transformers' schedules count steps, and the steps a deadline pays for are known only once the run's own speed is
(a continued trial trains with every core the search used, which the probe never timed). So the run times itself:
after each optimizer step it re-estimates the step that ends in time, from its measured seconds per step and per
evaluation, and re-draws the linear decay from the current rate to zero at that step. The rate never jumps (each
re-draw starts where the last one was), it reaches zero at the last step, and the last step is evaluated and saved;
a periodic evaluation that would fall less than half a period before it is skipped, and its seconds trained in. Told
how many evaluations to make, it spaces them over the steps it has timed, not the ones it was told to expect. Told
a last step (search.exploit.max_epochs), it ends there if the deadline is later, its decay to zero at that step.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from transformers import TrainerCallback

# Steps timed before the end is re-estimated: the first ones carry the warm-up of a fresh process.
MIN_TIMED_STEPS = 3
# The Trainer's loop bound is the provisional end times this: the run stops itself at its deadline long before. The
# provisional end comes from the source trial's speed, one core shared with other trials; the continuation on every
# core, without the baseline's dropout, trained 3x as fast on the plain tweets file. A bound it reaches ends it early
# with its budget unspent, one well above costs nothing (the Trainer only loops that far), so it is generous.
OVERSHOOT = 20
# A periodic evaluation this close to the last one (in evaluation periods) is skipped: the last step's evaluation
# says the same a few steps later, and an evaluation with its save costs what a few dozen steps would train (the
# tweets example's continuation evaluated at steps 1,332 and 1,388; each pass and save about 10 s on 2 cores).
SKIPPED_BEFORE_LAST = 0.5
# Steps timed before the evaluations are spaced over the run's measured length (more than MIN_TIMED_STEPS: the
# spacing is set once, and a process's first steps are its slowest).
SPACED_AFTER_STEPS = 10


def steps_that_fit(seconds_left: float, seconds_per_step: float, seconds_per_evaluation: float,
                   eval_every_steps: int, step: int = 0) -> int:
    """Optimizer steps after `step` that fit in `seconds_left`, with the evaluations (each with its checkpoint's save)
    the Trainer makes at every multiple of `eval_every_steps` and one at the last step."""

    def cost(steps: int) -> float:
        end = step + steps
        evaluations = end // eval_every_steps - step // eval_every_steps + (end % eval_every_steps != 0)
        return steps * seconds_per_step + evaluations * seconds_per_evaluation

    if seconds_per_step <= 0 or cost(1) > seconds_left:
        return 0
    low, high = 1, int(seconds_left / seconds_per_step) + 1  # cost(low) fits; cost(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if cost(middle) <= seconds_left else (low, middle)
    return low


class FinishByDeadline(TrainerCallback):
    """Ends training by `deadline` (time.time() seconds) with a linear decay to zero re-drawn as the run times itself.

    `restart`: the run continues another run's checkpoint whose schedule had ended; its rate restarts where a run
    planned from step 0 to the provisional end (the Trainer's max_steps over OVERSHOOT) would be at the checkpoint's
    step (a warm restart). Otherwise the rate goes on from where the checkpoint's schedule left it (a resumed run),
    or from the warm-up of a run from step 0. `evaluation_seconds`: what an evaluation and its save cost, until the
    run has measured one. `evaluations`: how many it makes, its last one included, evenly from its own start over
    the length it has timed (never more often than its arguments' period; 0: the Trainer's multiples of that period
    from step 0). The period it is told comes from the source trial's speed, and a continuation on every core,
    without the baseline's dropout, trained 3x that fast: it evaluated five times where three were asked.
    `last_step`: the step it ends at when its deadline would let it train longer (0: none)."""

    def __init__(self, deadline: float, evaluation_seconds: float, restart: bool = False,
                 clock: Callable[[], float] = time.time, evaluations: int = 0, last_step: int = 0):
        self.deadline, self.evaluation_seconds, self.restart, self.clock = deadline, evaluation_seconds, restart, clock
        self.evaluations, self.last_step = evaluations, last_step
        self.end_step = 0
        self._began_at = self._evaluating_since = 0.0
        self._began_step = 0
        self._evaluation_total = 0.0  # seconds spent evaluating and saving since the run began
        self._told_period = self._period = 0  # with `evaluations`: steps between them, counted from the run's start
        self._periodic_made = 0

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        # A resumed Trainer takes its evaluation, save and logging steps from the checkpoint's state; this run keeps
        # its own (a continuation evaluates less often than the trial it continues).
        state.compute_steps(args, args.max_steps)
        self._began_at, self._began_step = self.clock(), state.global_step
        provisional = args.max_steps // OVERSHOOT
        self.end_step = max(self._capped(provisional), state.global_step + 1)
        if self.evaluations:  # spaced over the provisional end until the run has timed its own
            self._told_period = state.eval_steps
            self._space()
        if lr_scheduler is not None and self._decaying(args, state):
            factor = (max(provisional - state.global_step, 1) / provisional if self.restart
                      else _current_factor(lr_scheduler))
            redraw_linear_decay(lr_scheduler, factor, self.end_step)

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        now = self.clock()
        timed = state.global_step - self._began_step
        if self.evaluations:  # this run's own evaluation steps, not the flow's multiples of a period from step 0
            control.should_evaluate = control.should_save = self._evaluates_at(timed)
        if timed >= MIN_TIMED_STEPS:
            per_step = max(now - self._began_at - self._evaluation_total, 0.0) / timed
            # An evaluation the Trainer makes at this very step (its flow callback asked for it before this one
            # runs) is still to be paid for.
            pending = self.evaluation_seconds if control.should_evaluate else 0.0
            self._estimate_end(args, state, self.deadline - now - pending, per_step)
            if timed == SPACED_AFTER_STEPS and self.evaluations:
                for _ in range(2):  # fewer evaluations leave time for more steps: twice settles the end and period
                    self._space()
                    self._estimate_end(args, state, self.deadline - now - pending, per_step)
            if lr_scheduler is not None and self._decaying(args, state):
                redraw_linear_decay(lr_scheduler, _current_factor(lr_scheduler), max(self.end_step, state.global_step))
        if state.global_step >= self.end_step or now + self._untimed_margin(timed, now) >= self.deadline:
            control.should_training_stop = control.should_evaluate = control.should_save = True
        elif control.should_evaluate and self.end_step - state.global_step < SKIPPED_BEFORE_LAST * self._every(state):
            control.should_evaluate = control.should_save = False  # the next step re-plans without its seconds
        elif control.should_evaluate and self.evaluations:
            self._periodic_made += 1
        if control.should_evaluate:
            self._evaluating_since = now

    def _untimed_margin(self, timed: int, now: float) -> float:
        """Before the run has timed MIN_TIMED_STEPS it has no estimate of its end: another step and the last
        evaluation must still end by the deadline (a run that starts with seconds left, as a resumed continuation
        whose start-up a loaded machine slowed, would otherwise train to the deadline and evaluate past it)."""
        if timed >= MIN_TIMED_STEPS or timed <= 0:
            return 0.0
        return max(now - self._began_at - self._evaluation_total, 0.0) / timed + self.evaluation_seconds

    def _every(self, state) -> int:
        return self._period or state.eval_steps

    def _evaluates_at(self, timed: int) -> bool:
        """With `evaluations`: at every `_period` steps from the run's start, one fewer than asked (the last step's
        evaluation makes the count), none before the run has timed its end and spaced them over it where the
        provisional end already made the period wider than the one told."""
        if self._period > self._told_period and timed < SPACED_AFTER_STEPS:
            return False
        return timed > 0 and timed % self._period == 0 and self._periodic_made < self.evaluations - 1

    def _estimate_end(self, args, state, seconds_left: float, per_step: float) -> None:
        # The evaluations' steps counted as this run makes them: from its start with `evaluations`, else from step 0.
        offset = self._began_step if self.evaluations else 0
        fit = steps_that_fit(seconds_left, per_step, self.evaluation_seconds, self._every(state),
                             state.global_step - offset)
        self.end_step = self._capped(min(state.global_step + fit, args.max_steps))

    def _capped(self, end_step: int) -> int:
        """`end_step`, or the last step where that comes first."""
        return min(end_step, self.last_step) if self.last_step else end_step

    def _space(self) -> None:
        """`evaluations` evenly over the steps from the run's start to its end as now estimated, never more often than
        told (at a period told from the source trial's speed, the tweets example's continuation from step 345
        evaluated at 594, 1,188, 1,782 and 2,138: four where three were asked, each a validation pass and a save)."""
        self._period = max(self._told_period, math.ceil((self.end_step - self._began_step) / self.evaluations))

    def _decaying(self, args, state) -> bool:
        """Past the warm-up (a run from step 0 warms up as planned; a restart does not warm up again)."""
        return self.restart or state.global_step >= args.warmup_steps

    def on_save(self, args, state, control, **kwargs):
        if self._evaluating_since:
            self.evaluation_seconds = self.clock() - self._evaluating_since  # the latest: the machine's load moves
            self._evaluation_total += self.evaluation_seconds
            self._evaluating_since = 0.0


def _current_factor(scheduler) -> float:
    """The rate the scheduler set last, as a fraction of its base rate."""
    return scheduler.get_last_lr()[0] / scheduler.base_lrs[0]


def redraw_linear_decay(scheduler, factor: float, end_step: int) -> None:
    """From the scheduler's current step on, the rate falls linearly from `factor` x its base rate to zero at
    `end_step`. The optimizer's rate is set now too: the step the scheduler took last already set the old one."""
    start = scheduler.last_epoch
    span = max(end_step - start, 1)

    def linear(step: int) -> float:
        return factor * max(end_step - step, 0) / span

    scheduler.lr_lambdas = [linear] * len(scheduler.lr_lambdas)
    rates = [base * factor for base in scheduler.base_lrs]
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = rates  # what get_last_lr (the Trainer's logged learning_rate) reads
