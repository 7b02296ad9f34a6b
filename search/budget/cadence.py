"""How often the trials evaluate where the sweep file leaves search.eval_every_steps to auto: AUTO_EVAL_EVERY_STEPS
(a trial's max_steps at most), fewer under a time budget where a trial of the slowest combination would not evaluate
twice in the trials' share of it (ASHA and the winner's pick need two evaluations to compare).

A causal LM on a 2-core CPU trains 0.9 samples per second at 208 tokens: at 50 steps of the default effective batch
sizes (16 and 32) its first evaluation came after 434 s, and a 10-minute limit refused the file. A number the file
writes stands. Pure: the probe's combination times in, the cadence out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from finesweep.spaces.search_config import AUTO_EVAL_EVERY_STEPS

if TYPE_CHECKING:
    from finesweep.search.budget.plan import CombinationTimes


def planned_cadence(every: int | Literal["auto"], max_steps: int, trials_seconds: float | None,
                    combinations: list[CombinationTimes]) -> tuple[int, list[str]]:
    """search.eval_every_steps (`every`) with auto resolved: AUTO_EVAL_EVERY_STEPS (`max_steps` at most), lowered
    where it lets no trial of the slowest combination evaluate twice in the trials' `trials_seconds`; and the plan's
    notes (none where it stands)."""
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
