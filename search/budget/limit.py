"""What search.time_limit leaves each phase: the probe's share, the export's estimate and the fixed costs the
command spends outside the phases, and the search's budget, which is the rest."""

from __future__ import annotations

from finesweep.search.budget.export_fit import fit_export
from finesweep.search.budget.measured import (EXIT_SECONDS, EXPORT_ESTIMATE_MARGIN, PROBE_SETTLE_SECONDS,
                                              RAY_START_SECONDS, RECORDS_SECONDS, TRIAL_START_SECONDS)
from finesweep.search.budget.plan import Allowance, PlanInputs, budget_split, export_estimate
from finesweep.spaces import SweepConfig, SweepFileError
from finesweep.spaces.config import ExportConfig

# Under search.time_limit, the probe's share of it: a user who says 10 minutes wants them spent training. On 2 cores
# the LLM example's LoRA probe alone took 6.8 minutes unbounded (micro-batches 4 to 32 at 5 to 54 s a step).
PROBE_SHARE = 0.1


def probe_seconds(limit: float | None) -> float | None:
    """The probe's seconds under search.time_limit (None: no limit, the probe takes what it takes)."""
    return max(PROBE_SHARE * limit - PROBE_SETTLE_SECONDS, 0.0) if limit else None


# What `finesweep run` spends outside the data, the probe, the search's budget and the export (measured.py).
LIMIT_OVERHEAD_SECONDS = RAY_START_SECONDS + RECORDS_SECONDS + EXIT_SECONDS


def within_limit(config: SweepConfig, inputs: PlanInputs, limit: float, elapsed: float) -> Allowance:
    """What search.time_limit leaves the search after the `elapsed` seconds (data, probe) and the export's estimate
    (which does not depend on the search's budget; kept near a third of what is left, search/budget/export_fit.py),
    with the sentence that says so; a SweepFileError, before anything trains, when that cannot pay for one trial's
    start and first evaluation."""
    left = limit - elapsed

    def export_seconds(export: ExportConfig) -> float:
        return sum(export_estimate(config, inputs, export)[0].values())

    fitted, lighter = fit_export(config.export, config.data.task, export_seconds, left, inputs.cuda)
    export = export_seconds(fitted)
    spare = EXPORT_ESTIMATE_MARGIN * export + LIMIT_OVERHEAD_SECONDS
    search = left - export - spare
    equal_time = config.search.baseline_budget == "equal"
    if equal_time:  # the baseline trains again as long as the export did (equal_time.py), one start more
        search = (search - TRIAL_START_SECONDS) / 2
    # The cadence the search's own budget divides (search/budget/cadence.py lowers a default one where it must).
    every = budget_split(config, inputs, max(search, 1.0)).eval_every_steps
    needed = min(c.start_seconds + c.period_seconds(every) for c in inputs.combinations)
    if search < needed:
        raise SweepFileError(
            f"search.time_limit {config.search.time_limit}: the data and the probe took {elapsed:.0f} s and the export "
            f"is predicted to take {export:.0f} s (with {spare:.0f} s for Ray, the records, the process's exit and the "
            f"estimate's error), which leaves {max(search, 0):.0f} s for the search, but one trial needs "
            f"{needed:.0f} s to start and reach its first evaluation ({every} steps of the fastest combination). Raise "
            f"the limit to at least {elapsed + export + spare + needed:.0f}s, or make a step "
            "cheaper (a shorter data.max_seq_len, a smaller search.eval_every_steps, fewer export.quantization "
            "variants); the data and the probe are cached, so a second run starts faster.")
    division = (f"the time limit {config.search.time_limit} ({limit:.0f} s) divided: data and probe {elapsed:.0f} s, "
                f"search {search:.0f} s, "
                + ("and up to as long again for the baseline at equal time, " if equal_time else "")
                + f"export {export:.0f} s (predicted), Ray, the records, the exit and the "
                f"estimate's error {spare:.0f} s"
                + (f"; {lighter}" if lighter else ""))
    return Allowance(max(search, 1.0), fitted, division)
