"""The search in simulated time (search/budget/plan.py runs it): trials of random quality take the combinations in
turn, ASHA stops them at its rungs exactly as Ray does, the budget ends what runs. Pure."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from finesweep.search.budget.measured import TRIAL_START_SECONDS



@dataclass
class Simulated:
    """One simulated search."""

    seconds: float
    started: int
    completed: int  # trained to max_steps
    stopped_early: int  # by ASHA
    cut_by_budget: int


def asha_milestones(max_evaluations: int, grace_period: int, reduction_factor: float) -> list[int]:
    """The evaluations at which ASHA judges a trial, lowest first: Ray's single bracket puts its rungs at
    grace x rf^k for k below int(log(max/grace) / log(rf) + 1) (tests/search/probe/test_plan.py checks Ray's own)."""
    grace = min(grace_period, max_evaluations)
    rungs = int(math.log(max_evaluations / grace) / math.log(reduction_factor) + 1)
    return [int(grace * reduction_factor ** k) for k in range(rungs)]


@dataclass(frozen=True)
class Lane:
    """What a trial of one combination costs in the simulation: seconds and optimizer steps per evaluation."""

    period_seconds: float
    steps: int
    start_seconds: float = TRIAL_START_SECONDS


def simulate(lanes: list[Lane], *, evaluations: int, num_trials: int, concurrency: int,
             milestones: list[int] | None, reduction_factor: float, time_budget: float | None,
             step_budget: int | None, seed: int, qualities: list[float] | None = None) -> Simulated:
    """One run of the search in simulated time, evaluation by evaluation in the order they happen: trials take the
    lanes (combinations) in turn, `concurrency` at once, a new one as soon as a slot frees; each has a random
    quality that its every evaluation reports; ASHA stops a trial at a rung when its quality is below the
    (1 - 1/rf) percentile of those recorded there (Ray's rule: the first at a rung always goes on); the budget ends
    what runs when it is spent, and no trial starts that could not evaluate before that (it would only delay the
    winner). `qualities`: the trials' qualities in order, instead of random ones."""
    rng = random.Random(seed)
    rungs: dict[int, list[float]] = {m: [] for m in (milestones or []) if m < evaluations}
    outcome = Simulated(0.0, 0, 0, 0, 0)
    events: list[tuple[float, int, int]] = []  # (when, trial, the evaluation it reaches then)
    quality: dict[int, float] = {}

    def lane(trial: int) -> Lane:
        return lanes[trial % len(lanes)]

    def start(at: float) -> None:
        first = lane(outcome.started)
        late = at > 0 and time_budget is not None and at + first.start_seconds + first.period_seconds > time_budget
        if outcome.started < num_trials and not late:
            trial = outcome.started
            outcome.started += 1
            quality[trial] = qualities[trial] if qualities else rng.random()
            heapq.heappush(events, (at + lane(trial).start_seconds + lane(trial).period_seconds, trial, 1))

    for _ in range(concurrency):
        start(0.0)
    now, steps_spent = 0.0, 0
    while events:
        at, trial, evaluation = heapq.heappop(events)
        if time_budget is not None and at > time_budget:
            now, outcome.cut_by_budget = time_budget, outcome.cut_by_budget + 1 + len(events)
            break
        now, steps_spent = at, steps_spent + lane(trial).steps
        end = "completed" if evaluation >= evaluations else _asha(rungs, evaluation, quality[trial], reduction_factor)
        if step_budget is not None and steps_spent >= step_budget:
            outcome.cut_by_budget += len(events) + (end is None)
            outcome.completed += end == "completed"
            outcome.stopped_early += end == "stopped"
            break
        if end is None:
            heapq.heappush(events, (at + lane(trial).period_seconds, trial, evaluation + 1))
            continue
        outcome.completed += end == "completed"
        outcome.stopped_early += end == "stopped"
        start(at)
    outcome.seconds = now
    return outcome


def _asha(rungs: dict[int, list[float]], evaluation: int, quality: float, reduction_factor: float) -> str | None:
    """"stopped" when ASHA stops a trial reporting `quality` at `evaluation`, None when it goes on."""
    if evaluation not in rungs:
        return None
    recorded = rungs[evaluation]
    stop = bool(recorded) and quality < _percentile(recorded, 1 - 1 / reduction_factor)
    recorded.append(quality)
    return "stopped" if stop else None


def _percentile(values: list[float], fraction: float) -> float:
    """numpy's default (linear) percentile, as Ray's ASHA takes it."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
