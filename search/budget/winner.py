"""How much of a time budget the search's winner trains further (search.exploit.share), decided in one place:
`winner_share` applies the rules below in order, each of which may only lower the share the one before gave.
Pure: no model, no Ray."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from finesweep.search.budget.cadence import planned_cadence
from finesweep.search.budget.schedule import fewest_trial_samples
from finesweep.spaces.search_config import AUTO_MAX_PASSES, AUTO_MIN_PASSES, AUTO_MIN_SAMPLES, AUTO_SHARE_UNPLANNED
from finesweep.spaces.sections import Task

if TYPE_CHECKING:
    from finesweep.search.budget.plan import CombinationTimes
    from finesweep.search.budget.schedule import Schedule
    from finesweep.spaces.search_config import SearchConfig

@dataclass(frozen=True)
class Split:
    """The search's budget split between the trials and the winner: the settings with the share and the trials'
    cadence decided, the trials' schedule in their part, and the words for each decision."""

    search: SearchConfig
    schedule: Schedule  # at the decided share
    samples_per_evaluation: dict[str, int]
    cadence_notes: list[str]
    share_words: str  # appended to the budget split's sentence ("" where the share stands as written)
    spared_note: str  # the share given back to the trials whole ("" where it was not)


def winner_share(search: SearchConfig, combinations: list[CombinationTimes], train_rows: int, task: Task,
                 smallest_batch: int, trials_schedule: Callable) -> Split:
    """The winner's share of the time budget, in order: the file's share, or auto's from the passes the budget pays
    for (auto_share); the trials' cadence at that share (cadence.planned_cadence); lowered so that a trial
    of the slowest candidate starts and evaluates once (leaving_a_first_evaluation); with the trials' schedule at
    that share (`trials_schedule`: schedule.trials_schedule for this space and concurrency), none where every trial already makes the winner's passes
    (sparing_a_capped_winner), else lowered to what the winner's passes need (sizing_a_capped_winner); the
    trials' schedule again where the share fell. Without a time budget the share is the file's (or auto's fixed
    fallback) and takes no seconds."""
    words = ""
    budget = search.time_budget_minutes
    if search.exploit.share == "auto" and budget:
        share, words = auto_share(combinations, budget * 60, train_rows)
        search = _with_share(search, share)
    search, cadence_notes = planned_cadence(search, combinations, max(c.start_seconds for c in combinations))
    if budget:
        first = max(c.start_seconds + c.period_seconds(search.eval_every_steps) for c in combinations)
        search, lowered = leaving_a_first_evaluation(search, first)
        words += lowered
    schedule, per_evaluation = trials_schedule(search)
    fewest = fewest_trial_samples(schedule, per_evaluation, search.eval_every_steps, smallest_batch)
    search, spared = sparing_a_capped_winner(search, fewest, train_rows, task)
    sized = ""
    if not spared:
        slowest = min(combinations, key=lambda c: c.samples_per_second)
        search, sized = sizing_a_capped_winner(search, fewest, train_rows, slowest, task)
        words += sized
    if spared or sized:  # the trials' part grew: longer trials, perhaps more of them
        schedule, per_evaluation = trials_schedule(search)
    return Split(search, schedule, per_evaluation, cadence_notes, words, spared)


def _with_share(search: SearchConfig, share: float) -> SearchConfig:
    return search.model_copy(update={"exploit": search.exploit.model_copy(update={"share": share})})


# The winner's share at few and at many passes over the training split.
AUTO_SHARE_FEW_PASSES, AUTO_SHARE_MANY_PASSES = 0.75, AUTO_SHARE_UNPLANNED
AUTO_SHARE_PASSES = (1.0, 4.0)  # at or below the first, the first share; at or above the second, the second
# The trials' part of the budget holds this many times what a trial of the slowest candidate takes to start and
# reach its first evaluation (the LLM example's first trials, planned at 53 s, had not evaluated when their 50 s
# ended: no trial reported, nothing was exported).
FIRST_EVALUATION_ROOM = 1.5
# The winner's share holds this many times what its further training to search.exploit.max_epochs takes at the
# slowest candidate's trial speed (its evaluations, a slower start, a speed measured on a busier machine).
CAPPED_WINNER_ROOM = 1.5


def auto_share(combinations: list[CombinationTimes], budget_seconds: float, train_rows: int) -> tuple[float, str]:
    """search.exploit.share auto: the winner's share of a time budget from the passes over the training split the
    budget pays for, and the words that say so. A budget of one pass or fewer goes mostly to the winner: its model
    has not seen the data once, and more training is worth more than a finer comparison of recipes; from four passes
    on (BERT's fine-tuning grid ends at 4 epochs, past which more training buys little) the search keeps its default
    share.

    The passes are one trial's of the slowest candidate (the winner may be any of them), at the speed the probe
    measured for a trial: not the combinations' mean times the trials at once. That counted 4.7 passes on the
    plain tweets file (its 3-layer candidate's speed, two trials at once) where its 6-layer winner trained 1.15 in
    the whole budget, the winner's further training with every core included: the probe times the largest
    micro-batch (the plan counted 28 samples/s a trial where the trial at batch 8 trained 17), and two cores train
    1.74x one, not 2x (MiniLM, AVX-512)."""
    passes = budget_passes(combinations, budget_seconds, train_rows)
    if passes is None:
        return AUTO_SHARE_UNPLANNED, " (auto: no training speed measured)"
    low, high = AUTO_SHARE_PASSES
    weight = min(max((passes - low) / (high - low), 0.0), 1.0)
    share = round(AUTO_SHARE_FEW_PASSES + weight * (AUTO_SHARE_MANY_PASSES - AUTO_SHARE_FEW_PASSES), 2)
    return share, (f", auto: the budget pays for {passes:.1f} passes over the {train_rows:,} training rows at its "
                   "slowest candidate's speed")


def budget_passes(combinations: list[CombinationTimes], budget_seconds: float, train_rows: int) -> float | None:
    """Passes over the training split that `budget_seconds` pay for at the slowest candidate's trial speed (see
    auto_share); None without a measured speed or rows."""
    speed = min((c.samples_per_second for c in combinations), default=0.0)
    if train_rows < 1 or speed <= 0:
        return None
    return budget_seconds * speed / train_rows


def leaving_a_first_evaluation(search: SearchConfig, first_evaluation_seconds: float) -> tuple[SearchConfig, str]:
    """`search` with its exploit share (auto's or the file's) lowered where the trials' part of the time budget
    would end before a trial of the slowest candidate has started and evaluated once: trials that report nothing
    leave no winner to train further and nothing to export. The words say so (empty where the share stands)."""
    budget, share = search.time_budget_minutes * 60, search.exploit.fraction
    needed = FIRST_EVALUATION_ROOM * first_evaluation_seconds
    if budget * (1 - share) >= needed or share <= 0:
        return search, ""
    lowered = max(0.0, math.floor(100 * (1 - needed / budget)) / 100)
    return (_with_share(search, lowered),
            f"; lowered from {share:.2f} so that a trial of the slowest candidate starts and evaluates once "
            f"({needed:.0f} s)")


def sparing_a_capped_winner(search: SearchConfig, fewest_trial_samples: int, train_rows: int,
                            task: Task) -> tuple[SearchConfig, str]:
    """`search` with no share for the winner where every trial, run to its planned end, has made
    search.exploit.max_epochs passes over the training split: the winner's further training would end where it
    starts (a continuation from a checkpoint past them is refused), so its seconds go to the trials. A small data set
    does this: the chat categories' 371 rows are two passes in 93 steps of 8, and the example's trials train 750.
    The words say so (empty where the share stands)."""
    epochs, share = search.exploit.passes(train_rows, task), search.exploit.fraction
    if not (search.time_budget_minutes and epochs and train_rows > 0 and share > 0
            and search.exploit.start == "checkpoint"):
        return search, ""
    passes = fewest_trial_samples / train_rows
    if passes < epochs:
        return search, ""
    return (_with_share(search, 0.0),
            f"search.exploit.share {share:.2f} -> 0: every trial trains {fewest_trial_samples:,} samples or more "
            f"({passes:.1f} passes over the {train_rows:,} training rows), past the {epochs:g} passes at which the "
            "winner's further training ends (search.exploit.max_epochs), so the trials take the whole budget")


def sizing_a_capped_winner(search: SearchConfig, fewest_trial_samples: int, train_rows: int,
                           slowest: CombinationTimes, task: Task) -> tuple[SearchConfig, str]:
    """`search` with the winner's share lowered to what its further training can use: it ends at
    search.exploit.max_epochs passes over the training split, so on a small data set a share sized by the budget's
    passes (auto_share) is mostly left unspent while the trials, short of time, compare fewer recipes. A plain file on
    2,325 rows with a 7-minute limit kept 134 s for a winner that reached its two passes in 27 steps, and the sweep
    ended after 213 s of the 420 with three trials. The need: the samples from the shortest trial of the space to the
    passes, at the slowest candidate's trial speed, with CAPPED_WINNER_ROOM, and a trial's start. The baseline's trial
    (one pass at most) is not counted: where it wins, its further training may stop short of the passes, the price
    of the trials the seconds buy. The words say so (empty where the share stands)."""
    epochs, share = search.exploit.passes(train_rows, task), search.exploit.fraction
    if not (search.time_budget_minutes and epochs and train_rows > 0 and share > 0 and slowest.samples_per_second > 0
            and search.exploit.start == "checkpoint"):
        return search, ""
    remaining = max(round(epochs * train_rows) - fewest_trial_samples, 0)
    needed = CAPPED_WINNER_ROOM * remaining / slowest.samples_per_second + slowest.start_seconds
    sized = math.ceil(100 * needed / (search.time_budget_minutes * 60)) / 100
    if sized >= share:
        return search, ""
    return (_with_share(search, sized),
            f"; lowered from {share:.2f}: the winner's further training ends at {epochs:g} passes over the "
            f"{train_rows:,} training rows (search.exploit.max_epochs), {remaining:,} samples past the shortest "
            f"trial's {fewest_trial_samples:,}, about {needed:.0f} s at the slowest candidate's speed with room; the "
            "trials take the rest")


def passes_cap_words(search: SearchConfig, train_rows: int, task: Task) -> str:
    """The plan's words for search.exploit.max_epochs: where the winner's training ends if the budget pays for more."""
    passes = search.exploit.passes(train_rows, task)
    if not (passes and train_rows):
        return ""
    auto = (f" (auto: {AUTO_MIN_SAMPLES:,} samples, {AUTO_MIN_PASSES:g} to {AUTO_MAX_PASSES:g} passes)"
            if search.exploit.max_epochs == "auto" and Task(task) == Task.classification else "")
    return (f"; ending at {passes:.3g} passes over the {train_rows:,} training rows if that comes first: "
            f"search.exploit.max_epochs{auto}")
