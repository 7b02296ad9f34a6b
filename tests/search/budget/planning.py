"""The plan of a sweep file from probe answers, as search/measure.py computes it (plan_inputs, then search_plan), and
the export's whole estimate."""

from __future__ import annotations

from typing import Any

from finesweep.search.budget.export_time import export_steps
from finesweep.search.budget.plan import SearchPlan, plan_inputs, search_plan
from finesweep.search.probe.table import ProbeResult
from finesweep.spaces import SweepConfig


def plan_search(config: SweepConfig, probes: dict[str, ProbeResult], **measured: Any) -> SearchPlan | None:
    """The plan from the probe's answers (plan_inputs' arguments); None where no combination trains."""
    inputs = plan_inputs(config, probes, **measured)
    return search_plan(config, inputs) if inputs else None


def export_seconds(*args: Any, **kwargs: Any) -> float:
    """The export's estimate: the sum of export_steps'."""
    return sum(export_steps(*args, **kwargs).values())
