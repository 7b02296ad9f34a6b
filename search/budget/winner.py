"""How much of a time budget the search's winner trains further (search.exploit.share), decided in one function:
`winner_share` applies the rules below in order, each of which may only lower the share the one before gave. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from finesweep.search.budget.schedule import (configurations_compared, fewest_trial_samples, halving_seconds,
                                              planned_cadence, trials_schedule)
from finesweep.spaces.search_config import AUTO_MAX_PASSES, AUTO_MIN_PASSES, AUTO_MIN_SAMPLES, AUTO_SHARE_UNPLANNED
from finesweep.spaces.sections import Task

if TYPE_CHECKING:
    from finesweep.search.budget.schedule import Schedule
    from finesweep.search.budget.speed import CombinationTimes
    from finesweep.spaces.search_config import SearchConfig

# auto's share at or below the first number of passes over the training split, and at or above the second (BERT's
# fine-tuning grid ends at 4 epochs, past which more training buys little); linear between.
AUTO_SHARE_FEW_PASSES, AUTO_SHARE_MANY_PASSES = 0.75, AUTO_SHARE_UNPLANNED
AUTO_SHARE_PASSES = (1.0, 4.0)
# The room a share leaves, in times the need it is sized for: a first evaluation's (the trials' part) and a capped
# winner's training (its evaluations, a slower start, a speed measured on a busier machine).
FIRST_EVALUATION_ROOM = 1.5
CAPPED_WINNER_ROOM = 1.5
CONFIGURATIONS_ROOM = 1.1  # the room over the simulated halving of the configurations (a median run)
# The least share leaving_configurations leaves the winner, where the file's or auto's gave it more: what auto gives a
# budget of many passes over the data.
WINNER_SHARE_FLOOR = AUTO_SHARE_MANY_PASSES


@dataclass(frozen=True)
class Split:
    """The search's budget divided between the trials and the winner: the winner's share, the trials' cadence and
    their schedule in their part, and the words for each decision."""

    share: float  # of the search's time budget, for the winner's training after the trials
    eval_every_steps: int
    schedule: Schedule
    samples_per_evaluation: dict[str, int]  # per combination, where the trials are allotted time
    cadence_notes: list[str]
    share_words: str  # appended to the budget split's sentence ("" where the share stands as written)
    spared_note: str  # the share given back to the trials whole ("" where it was not)

    def winner_seconds(self, budget_seconds: float | None) -> float:
        return self.share * budget_seconds if budget_seconds else 0.0

    def trials_seconds(self, budget_seconds: float | None) -> float | None:
        """The trials' part of the search's budget (None: no time budget)."""
        return budget_seconds - self.winner_seconds(budget_seconds) if budget_seconds else None


def winner_share(search: SearchConfig, budget: float | None, combinations: list[CombinationTimes], train_rows: int,
                 task: Task, effective_batches: list[int], concurrency: int, continues: bool = True) -> Split:
    """The winner's share of the search's `budget` seconds, in order: the file's share, or auto's from the passes
    the budget pays for (auto_share); the trials' cadence at that share; lowered so that a trial of the slowest
    candidate starts and evaluates once (leaving_a_first_evaluation), and so that ASHA's configurations reach its
    first rung (leaving_configurations); with the trials' schedule at that share,
    lowered to what a winner whose training ends at search.exploit.max_epochs can use (capped_winner); the
    schedule again where it fell. `budget` None: the file's share or auto's fixed one, which buys no seconds.
    `continues` False (data-parallel trials, whose workers a continuation does not drive): no share."""
    if not continues:
        share, words = 0.0, ""
    elif search.exploit.share == "auto" and budget:
        share, words = auto_share(combinations, budget, train_rows)
    else:
        share, words = search.exploit.fraction, ""
    every, cadence_notes = planned_cadence(search.eval_every_steps, search.max_steps, _trials_seconds(budget, share),
                                           combinations)
    if budget:
        first = max(c.start_seconds + c.period_seconds(every) for c in combinations)
        share, lowered = leaving_a_first_evaluation(budget, share, first)
        words += lowered
        halving = halving_seconds(combinations, search, concurrency, max(1, search.max_steps // every))
        share, lowered = leaving_configurations(budget, share, halving, configurations_compared(search))
        words += lowered

    def schedule_at(share: float) -> tuple[Schedule, dict[str, int]]:
        return trials_schedule(combinations, search, every, _trials_seconds(budget, share), effective_batches,
                               concurrency)

    schedule, per_evaluation = schedule_at(share)
    epochs = search.exploit.passes(train_rows, task)
    spared = ""
    if budget and epochs and train_rows > 0 and search.exploit.start == "checkpoint" and share > 0:
        fewest = fewest_trial_samples(schedule, per_evaluation, every, min(effective_batches))
        slowest = min(combinations, key=lambda c: c.samples_per_second)
        capped, sized, spared = capped_winner(budget, share, fewest, train_rows, epochs, slowest)
        if capped < share:  # the trials' part grew: longer trials, perhaps more of them
            share, words = capped, words + sized
            schedule, per_evaluation = schedule_at(share)
    return Split(share, every, schedule, per_evaluation, cadence_notes, words, spared)


def unmeasured_share(search: SearchConfig, budget: float | None, continues: bool = True) -> float:
    """The winner's share where the probe measured nothing to plan from: the file's, auto's fixed fallback; none
    without a time budget or a winner that can train further (see winner_share)."""
    return search.exploit.fraction if budget and continues else 0.0


def _trials_seconds(budget: float | None, share: float) -> float | None:
    return budget * (1 - share) if budget else None


def auto_share(combinations: list[CombinationTimes], budget_seconds: float, train_rows: int) -> tuple[float, str]:
    """search.exploit.share auto, and the words that say so: a budget of one pass over the training split or fewer
    goes mostly to the winner (its model has not seen the data once: more training is worth more than a finer
    comparison of recipes); from AUTO_SHARE_PASSES' upper end on, the search keeps the default share."""
    passes = budget_passes(combinations, budget_seconds, train_rows)
    if passes is None:
        return AUTO_SHARE_UNPLANNED, " (auto: no training speed measured)"
    low, high = AUTO_SHARE_PASSES
    weight = min(max((passes - low) / (high - low), 0.0), 1.0)
    share = round(AUTO_SHARE_FEW_PASSES + weight * (AUTO_SHARE_MANY_PASSES - AUTO_SHARE_FEW_PASSES), 2)
    return share, (f", auto: the budget pays for {passes:.1f} passes over the {train_rows:,} training rows at its "
                   "slowest candidate's speed")


def budget_passes(combinations: list[CombinationTimes], budget_seconds: float, train_rows: int) -> float | None:
    """Passes over the training split that `budget_seconds` pay for at the slowest candidate's measured trial speed
    (the winner may be any; trials at once do not add up to one model's speed); None without a speed or rows."""
    speed = min((c.samples_per_second for c in combinations), default=0.0)
    if train_rows < 1 or speed <= 0:
        return None
    return budget_seconds * speed / train_rows


def leaving_a_first_evaluation(budget: float, share: float, first_evaluation_seconds: float) -> tuple[float, str]:
    """The share lowered where the trials' part of the `budget` would end before a trial of the slowest candidate
    has started and evaluated once (trials that report nothing leave no winner to train further and nothing to
    export); the words say so (empty where the share stands)."""
    needed = FIRST_EVALUATION_ROOM * first_evaluation_seconds
    if budget * (1 - share) >= needed or share <= 0:
        return share, ""
    lowered = max(0.0, math.floor(100 * (1 - needed / budget)) / 100)
    return lowered, (f"; lowered from {share:.2f} so that a trial of the slowest candidate starts and evaluates once "
                     f"({needed:.0f} s)")


def leaving_configurations(budget: float, share: float, halving: float, configurations: int) -> tuple[float, str]:
    """The share lowered where the trials' part of the `budget` would not pay for `configurations` halved by ASHA
    at the shortest period (`halving` seconds, schedule.halving_seconds), with CONFIGURATIONS_ROOM: a small budget
    compares configurations before it trains one further. Never below WINNER_SHARE_FLOOR (the winner's training,
    from the best checkpoint, is what the user keeps). The words say so (empty where the share stands)."""
    needed = CONFIGURATIONS_ROOM * halving
    if configurations < 2 or budget * (1 - share) >= needed or share <= 0:
        return share, ""
    floor = min(share, WINNER_SHARE_FLOOR)
    lowered = max(floor, math.floor(100 * (1 - needed / budget)) / 100)
    if lowered >= share:
        return share, ""
    if lowered == floor:
        return lowered, (f"; lowered from {share:.2f} to the least it leaves the winner: {configurations} "
                         f"configurations halved by ASHA need {needed:.0f} s")
    return lowered, (f"; lowered from {share:.2f} so that {configurations} configurations start, evaluate and "
                     f"are halved by ASHA ({needed:.0f} s)")


def capped_winner(budget: float, share: float, fewest_trial_samples: int, train_rows: int, epochs: float,
                  slowest: CombinationTimes) -> tuple[float, str, str]:
    """The share a winner whose training ends at `epochs` passes over the training split can use: none where every
    trial, run to its planned end, has made them already (the seconds go to the trials: a small data set); else
    what the samples from the shortest trial to the passes take at the slowest candidate's speed, with
    CAPPED_WINNER_ROOM and a trial's start. Returns the share, the words appended where it was lowered, and the
    note where none is left ("" where the share stands)."""
    passes = fewest_trial_samples / train_rows
    if passes >= epochs:
        return 0.0, "", (f"search.exploit.share {share:.2f} -> 0: every trial trains {fewest_trial_samples:,} samples "
                         f"or more ({passes:.1f} passes over the {train_rows:,} training rows), past the {epochs:g} "
                         "passes at which the winner's further training ends (search.exploit.max_epochs), so the "
                         "trials take the whole budget")
    if slowest.samples_per_second <= 0:
        return share, "", ""
    remaining = max(round(epochs * train_rows) - fewest_trial_samples, 0)
    needed = CAPPED_WINNER_ROOM * remaining / slowest.samples_per_second + slowest.start_seconds
    sized = math.ceil(100 * needed / budget) / 100
    if sized >= share:
        return share, "", ""
    return sized, (f"; lowered from {share:.2f}: the winner's further training ends at {epochs:g} passes over the "
                   f"{train_rows:,} training rows (search.exploit.max_epochs), {remaining:,} samples past the shortest "
                   f"trial's {fewest_trial_samples:,}, about {needed:.0f} s at the slowest candidate's speed with "
                   "room; the trials take the rest"), ""


def passes_cap_words(search: SearchConfig, train_rows: int, task: Task) -> str:
    """The plan's words for search.exploit.max_epochs: where the winner's training ends if the budget pays for more."""
    passes = search.exploit.passes(train_rows, task)
    if not (passes and train_rows):
        return ""
    auto = (f" (auto: {AUTO_MIN_SAMPLES:,} samples, {AUTO_MIN_PASSES:g} to {AUTO_MAX_PASSES:g} passes)"
            if search.exploit.max_epochs == "auto" and Task(task) == Task.classification else "")
    return (f"; ending at {passes:.3g} passes over the {train_rows:,} training rows if that comes first: "
            f"search.exploit.max_epochs{auto}")
