"""How often the trials evaluate, under a time budget, where the sweep file leaves search.eval_every_steps at its
default: fewer steps between evaluations where a trial of the slowest combination would not evaluate twice in the
trials' share of the budget (ASHA and the winner's pick need two evaluations to compare).

A causal LM on a 2-core CPU trains 0.9 samples per second at 208 tokens: at the default 50 steps of the default
effective batch sizes (16 and 32) its first evaluation came after 434 s, and a 10-minute limit refused the file
(benchmarks/README.md, "A causal-LM sweep written plainly"). A number the file writes other than the default is kept.
Pure: the probe's combination times in, the search settings out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from finesweep.spaces.search_config import SearchConfig

if TYPE_CHECKING:
    from finesweep.search.budget.plan import CombinationTimes

# Told by its value, not by fields set: the config reaches the plan re-validated from a dump, every field set.
DEFAULT_EVAL_EVERY_STEPS = SearchConfig.model_fields["eval_every_steps"].default


def planned_cadence(every: int, trials_seconds: float | None,
                    combinations: list[CombinationTimes]) -> tuple[int, list[str]]:
    """The file's eval_every_steps (`every`), lowered where the default lets no trial of the slowest combination
    evaluate twice in the trials' `trials_seconds`, and the plan's notes (none where it stands)."""
    if not trials_seconds or every != DEFAULT_EVAL_EVERY_STEPS:
        return every, []
    start = max(c.start_seconds for c in combinations)
    slowest = max(combinations, key=lambda c: c.period_seconds(every))
    if start + 2 * slowest.period_seconds(every) <= trials_seconds or slowest.seconds_per_step <= 0:
        return every, []
    room = (trials_seconds - start) / 2 - slowest.seconds_per_evaluation
    fits = max(1, math.floor(room / slowest.seconds_per_step))
    if fits >= every:
        return every, []
    return fits, [f"search.eval_every_steps {every} -> {fits}: at {every} steps ({slowest.period_seconds(every):.0f} s "
                  f"with its evaluation) a trial of {slowest.key} would not evaluate twice in the trials' "
                  f"{trials_seconds:.0f} s"]
