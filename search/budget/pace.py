"""The plan's trial times set against the trials' own as they run: the seconds to a trial's next evaluation, and the
trials' pace (their measured periods over the plan's), by which the trials' share stops a trial that could not
evaluate again in it and starts none that could not evaluate once (search/tuning/trials_share.py). Pure."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from finesweep.search.budget.plan import SearchPlan
from finesweep.search.probe.table import combination_key


@dataclass(frozen=True)
class TrialTimes:
    """A combination's trial as the plan timed it: from its launch to its first step, and one evaluation period."""

    start: float
    period: float

    @property
    def first_evaluation(self) -> float:
        return self.start + self.period


def planned_times(plan: SearchPlan) -> dict[str, TrialTimes]:
    """Per combination key, the plan's times (empty where it measured none)."""
    return {c.key: TrialTimes(c.start_seconds, plan.period(c)) for c in plan.combinations}


def trial_key(config: dict[str, Any]) -> str | None:
    """The combination key of a trial's config (None where it names no model, precision and method)."""
    try:
        return combination_key(config["model"], config["precision"], config["method"])
    except (KeyError, TypeError):
        return None


def _last_period(result: dict[str, Any], times: dict[str, TrialTimes]) -> tuple[float | None, bool, TrialTimes | None]:
    """What a Tune result says of its trial's last period: its seconds (None without), whether it came after the
    first evaluation (the first also counts the model's load), and the plan's times for the trial."""
    seconds = result.get("time_this_iter_s")
    later = int(result.get("training_iteration") or 0) > 1
    planned = times.get(trial_key(result.get("config") or {}) or "")
    return (float(seconds) if isinstance(seconds, (int, float)) else None), later, planned


def next_period(result: dict[str, Any], times: dict[str, TrialTimes]) -> float | None:
    """The seconds to a trial's next evaluation, as its last period measured them: less the plan's start for the
    first. None where that cannot be told."""
    seconds, later, planned = _last_period(result, times)
    if seconds is None or later:
        return seconds
    return max(0.0, seconds - planned.start) if planned else None


def measured_pace(result: dict[str, Any], times: dict[str, TrialTimes]) -> float | None:
    """A trial's period (its second or later) over the plan's for its combination: how far off the plan runs."""
    seconds, later, planned = _last_period(result, times)
    if seconds is None or not later or not planned or planned.period <= 0:
        return None
    return seconds / planned.period


def mean_pace(paces: dict[str, float]) -> float:
    return statistics.fmean(paces.values()) if paces else 1.0

