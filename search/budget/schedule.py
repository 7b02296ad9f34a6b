"""How often the trials evaluate and how long they train, in their part of the budget.

With a time budget that cannot pay for every combination's `max_steps`, the trials are allotted time, not steps
(Hyperband's allocation in seconds): every evaluation period lasts what the fastest combination's does, a slower
combination trains fewer samples in it, and a trial has as many periods as fit after its start, stretched to fill
its room but a margin, so a trial started first ends its learning-rate schedule inside the budget (one the budget
cuts ends at its peak rate, undertrained) and ASHA compares trials at equal seconds. Pure.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from finesweep.search.budget.measured import BUDGET_MARGIN
from finesweep.search.budget.simulate import Lane, Simulated, asha_milestones, simulate
from finesweep.spaces.search_config import AUTO_EVAL_EVERY_STEPS, SearchConfig

if TYPE_CHECKING:
    from finesweep.search.budget.speed import CombinationTimes

TRIALS_COMPARED = 2  # the fewest trials a time budget's plan leaves room for: a search compares (see trial_room)
# The configurations an ASHA search on a small time budget is planned to start and evaluate at least once (as many
# as the file asks, if fewer): Hyperband's first rung, many configurations at a small resource. Eight is where
# successive halving at reduction factor 2 to 3 still promotes two or three to a second rung.
CONFIGURATIONS_COMPARED = 8
# Seeded runs of the search per period configurations_first tries: three in four must start the configurations (the
# trials' luck at ASHA's rungs decides how many lanes the promoted hold).
SCHEDULE_SIMULATIONS = 16


def planned_cadence(every: int | Literal["auto"], max_steps: int, trials_seconds: float | None,
                    combinations: list[CombinationTimes]) -> tuple[int, list[str]]:
    """search.eval_every_steps (`every`) with auto resolved: AUTO_EVAL_EVERY_STEPS (`max_steps` at most), lowered
    where a trial of the slowest combination would not evaluate twice in the trials' `trials_seconds` (ASHA and the
    winner's pick compare evaluations); and the plan's notes. A number the file writes stands."""
    if every != "auto":
        return every, []
    every = min(AUTO_EVAL_EVERY_STEPS, max_steps)
    if not trials_seconds or not combinations:
        return every, []
    start = max(c.start_seconds for c in combinations)
    slowest = max(combinations, key=lambda c: c.period_seconds(every))
    if start + 2 * slowest.period_seconds(every) <= trials_seconds or slowest.seconds_per_step <= 0:
        return every, []
    room = (trials_seconds - start) / 2 - slowest.seconds_per_evaluation
    fits = max(1, math.floor(room / slowest.seconds_per_step))
    if fits >= every:
        return every, []
    return fits, [f"search.eval_every_steps auto -> {fits}: at {every} steps ({slowest.period_seconds(every):.0f} s "
                  f"with its evaluation) a trial of {slowest.key} would not evaluate twice in the trials' "
                  f"{trials_seconds:.0f} s"]


@dataclass
class Schedule:
    """How long the trials train: evaluations per trial, and the seconds of each period when allotted in time."""

    evaluations: int
    period_seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def planned_schedule(combinations: list[CombinationTimes], max_steps: int, eval_every_steps: int,
                     time_budget: float | None, step_budget: int | None, concurrency: int) -> Schedule:
    """The trials' length: the file's max_steps where the budget pays for it with every combination; under a time
    budget that does not, periods of the fastest combination's length (at least twice the longest evaluation, so
    none spends more than half its time evaluating), as many as a trial started first fits after its start in its
    room (trial_room), stretched to fill it (_stretched); under a step budget, at most the steps it pays for."""
    evaluations = max_steps // eval_every_steps
    schedule = Schedule(evaluations)
    if time_budget is not None:
        slowest = max(combinations, key=lambda c: c.period_seconds(eval_every_steps))
        start = max(c.start_seconds for c in combinations)
        room, room_words = trial_room(time_budget, concurrency)
        if start + evaluations * slowest.period_seconds(eval_every_steps) > room:
            fastest = min(combinations, key=lambda c: c.period_seconds(eval_every_steps))
            longest_evaluation = max(c.seconds_per_evaluation for c in combinations)
            period = max(fastest.period_seconds(eval_every_steps), 2 * longest_evaluation)
            if room < time_budget and room - start < period:  # two trials do not fit: one, with the whole budget
                room, room_words = time_budget, ""
            fits = int((room - start) // period)
            why = (f"what {fastest.key} takes for {eval_every_steps} steps and its evaluation"
                   if period == fastest.period_seconds(eval_every_steps) else
                   f"twice the longest evaluation, {longest_evaluation:.0f} s")
            stretched = _stretched(period, fastest, fits, evaluations, max_steps, room, start)
            if stretched > period:
                period = stretched
                why += f", stretched to fill {'its room' if room_words else 'the budget'} but {BUDGET_MARGIN:.0%}"
            schedule = Schedule(max(1, min(evaluations, fits)), period)
            periods = f"{schedule.evaluations} evaluation period{'' if schedule.evaluations == 1 else 's'}"
            inside = room_words or "the trials' budget of"
            schedule.notes.append(
                f"trials allotted time: {periods} of {period:.0f} s each ({why}), so a trial started first ends "
                f"inside {inside} {room:.0f} s; {slowest.key} would take "
                f"{slowest.period_seconds(eval_every_steps):.0f} s per {eval_every_steps} steps, and trains fewer "
                "steps in the same time")
            if fits < 1:
                schedule.notes.append(f"the budget does not pay for one evaluation of {fastest.key}: raise "
                                      "search.time_budget_minutes or lower search.eval_every_steps")
    if step_budget is not None and step_budget < schedule.evaluations * eval_every_steps:
        schedule.evaluations = max(1, step_budget // eval_every_steps)
        schedule.notes.append(f"trials shortened to {schedule.evaluations * eval_every_steps} steps: the step budget "
                              f"is {step_budget}")
    return schedule


def trial_room(time_budget: float, concurrency: int) -> tuple[float, str]:
    """The seconds a trial started first may take of the trials' `time_budget`, and the words for it ("" where it
    is the whole budget). A search compares at least TRIALS_COMPARED trials: with that many at once a trial may
    take the whole budget while the others run beside it; with one at a time, a trial that filled the budget would
    be the only one (the baseline, which ASHA never stops), so it takes its share."""
    if concurrency >= TRIALS_COMPARED:
        return time_budget, ""
    share = concurrency / TRIALS_COMPARED
    at_once = f"{concurrency} trial{'s' if concurrency > 1 else ''} at a time"
    return time_budget * share, (f"its room of {share:.0%} of the trials' budget (with {at_once}, so that "
                                 f"{TRIALS_COMPARED} trials are compared):")


def _stretched(period: float, fastest: CombinationTimes, fits: int, evaluations: int, max_steps: int,
               time_budget: float, start: float) -> float:
    """The period lengthened so that the `fits` periods of a trial started first (after its `start` seconds) fill
    the budget but its margin, where fewer than the file's `evaluations` fit (the fastest combination then still
    trains max_steps at most); else the period as it is."""
    if not 0 < fits < evaluations:
        return period
    filling = (time_budget * (1 - BUDGET_MARGIN) - start) / fits
    ceiling = fastest.seconds_per_evaluation + max_steps * fastest.seconds_per_step / fits
    return max(period, min(filling, ceiling))


def samples_per_evaluation(combinations: list[CombinationTimes], period: float, mean_batch: float) -> dict[str, int]:
    """Per combination, the samples it trains in one period besides its evaluation (at least one mean batch)."""
    return {c.key: max(round(mean_batch), round((period - c.seconds_per_evaluation) * c.samples_per_second))
            for c in combinations}


def trials_schedule(combinations: list[CombinationTimes], search: SearchConfig, eval_every_steps: int,
                    trials_seconds: float | None, effective_batches: list[int],
                    concurrency: int) -> tuple[Schedule, dict[str, int]]:
    """The trials' schedule in their `trials_seconds` (None: no time budget), and the samples each combination
    trains per evaluation where they are allotted time (empty where every trial trains search.max_steps)."""
    schedule = Schedule(search.max_steps // eval_every_steps)
    if search.fit_to_budget:
        schedule = planned_schedule(combinations, search.max_steps, eval_every_steps, trials_seconds,
                                    search.step_budget, concurrency)
        schedule = configurations_first(schedule, combinations, search, eval_every_steps, trials_seconds,
                                        concurrency)
    per_evaluation = (samples_per_evaluation(combinations, schedule.period_seconds,
                                             statistics.fmean(effective_batches))
                      if schedule.period_seconds else {})
    return schedule, per_evaluation


def fewest_trial_samples(schedule: Schedule, per_evaluation: dict[str, int], eval_every_steps: int,
                          smallest_batch: int) -> int:
    """The training samples of the shortest trial that runs to its planned end: allotted time, each combination
    trains its samples per period whatever its batch; else every trial trains its steps, the smallest batch fewest."""
    if per_evaluation:
        return schedule.evaluations * min(per_evaluation.values())
    return schedule.evaluations * eval_every_steps * smallest_batch


def configurations_compared(search: SearchConfig) -> int:
    """The configurations the plan pays for first in a small time budget: with ASHA, the file's num_trials up to
    CONFIGURATIONS_COMPARED; without an early stopper every trial runs its whole length, so one."""
    return min(search.num_trials, CONFIGURATIONS_COMPARED) if search.scheduler == "asha" else 1


def shortest_period(combinations: list[CombinationTimes]) -> float:
    """The shortest evaluation period configurations_first allots: twice the quickest evaluation, so the combination
    that evaluates fastest spends half its time training. One that evaluates slower trains a batch at least per
    period and its periods run longer (lane_period): on this machine it learns less per second, which is what a
    comparison at equal seconds measures."""
    return min(2 * c.seconds_per_evaluation for c in combinations)


def lane_period(times: CombinationTimes, period: float) -> float:
    """The seconds a period of `period` takes a combination: its evaluation and at least one optimizer step."""
    return max(period, times.seconds_per_evaluation + times.seconds_per_step)


def halving_evaluations(search: SearchConfig, most: int) -> int:
    """A trial's evaluations where the plan puts configurations first: up to ASHA's second rung (grace period x
    reduction factor), where the better third or half has trained that many times longer than the rest; the winner's
    further training is the long run. `most`: the file's max_steps in evaluations, which bounds it."""
    return max(1, min(most, int(search.asha.grace_period * search.asha.reduction_factor)))


def halving_seconds(combinations: list[CombinationTimes], search: SearchConfig, concurrency: int,
                    most: int) -> float:
    """The seconds configurations_compared configurations take at the shortest period, `concurrency` at a time,
    stopped by ASHA at its rungs as Ray does (simulated, median run): what the trials' part of a small budget pays
    for first (winner.leaving_configurations). 0 where one configuration is all the plan compares."""
    wanted = configurations_compared(search)
    if wanted < 2:
        return 0.0
    runs = _halving(combinations, search, shortest_period(combinations), halving_evaluations(search, most), wanted,
                    concurrency, None)
    return sorted(run.seconds for run in runs)[len(runs) // 2]


def _halving(combinations: list[CombinationTimes], search: SearchConfig, period: float, evaluations: int,
             trials: int, concurrency: int, seconds: float | None) -> list[Simulated]:
    """SCHEDULE_SIMULATIONS runs of `trials` trials of `evaluations` periods under ASHA in `seconds` (None: all)."""
    lanes = [Lane(lane_period(c, period), 1, c.start_seconds) for c in combinations]
    milestones = asha_milestones(evaluations, search.asha.grace_period, search.asha.reduction_factor)
    return [simulate(lanes, evaluations=evaluations, num_trials=trials, concurrency=concurrency,
                     milestones=milestones, reduction_factor=search.asha.reduction_factor, time_budget=seconds,
                     step_budget=None, seed=seed) for seed in range(SCHEDULE_SIMULATIONS)]


def configurations_first(schedule: Schedule, combinations: list[CombinationTimes], search: SearchConfig,
                         eval_every_steps: int, trials_seconds: float | None, concurrency: int) -> Schedule:
    """Successive halving in a small budget: where the schedule's periods are too long for the
    configurations_compared to start and evaluate in the trials' seconds (simulated, in three runs of four), the
    longest period from the schedule's down to the shortest_period at which they do (as many as start at the
    shortest, where fewer do), with evaluations up to ASHA's second rung (halving_evaluations). ASHA then stops most
    at their first rung and the better train on; the periods are the same seconds for every combination, so
    configurations of different speed meet at equal time. The schedule as it is where it already starts as many."""
    wanted = configurations_compared(search)
    if not trials_seconds or wanted < 2 or search.step_budget is not None:
        return schedule
    # A schedule of steps (the budget pays for a trial's max_steps) is compared at the slowest combination's pace.
    longest = schedule.period_seconds or max(c.period_seconds(eval_every_steps) for c in combinations)
    start = max(c.start_seconds for c in combinations)
    first_rung = math.ceil(wanted / concurrency) * (start + search.asha.grace_period * longest)
    if first_rung <= trials_seconds:  # not a small budget: its trials run as long as it pays for
        return schedule
    room, _ = trial_room(trials_seconds, concurrency)
    most = max(1, search.max_steps // eval_every_steps)

    def evaluations(period: float) -> int:
        return max(1, min(halving_evaluations(search, most), int((room - start) // period)))

    def started(period: float, count: int | None = None) -> int:
        runs = _halving(combinations, search, period, count or evaluations(period), search.num_trials,
                        concurrency, trials_seconds)
        return sorted(run.started for run in runs)[len(runs) // 4]

    shortest = shortest_period(combinations)
    target = min(wanted, started(shortest)) if shortest < longest else 0
    if target <= started(longest, schedule.evaluations):
        return schedule
    planned = longest
    for _ in range(20):  # bisection: `target` start at the shortest period, fewer at the longest
        middle = (shortest + longest) / 2
        shortest, longest = (middle, longest) if started(middle) >= target else (shortest, middle)
    period, count = shortest, evaluations(shortest)
    most_words = f" (the most any period starts of the {wanted} planned for)" if target < wanted else ""
    note = (f"trials allotted time: {count} evaluation period{'' if count == 1 else 's'} of {period:.0f} s each, "
            f"shortened from {planned:.0f} s so that {target} configurations{most_words} start and "
            f"evaluate in the trials' {trials_seconds:.0f} s (simulated): successive halving, ASHA stops the weaker "
            "at its rungs and the better train on, every combination for the same seconds")
    kept = [n for n in schedule.notes if not n.startswith("trials allotted time")]
    return Schedule(count, period, [note, *kept])
