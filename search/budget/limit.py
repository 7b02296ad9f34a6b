"""What search.time_limit leaves each phase: the probe's share, the export (kept near a third of what is left), the
fixed costs the command spends outside the phases, and the search's budget, which is the rest. Pure."""

from __future__ import annotations

import math
from typing import Callable

from finesweep.search.budget.measured import (EXIT_SECONDS, EXPORT_ESTIMATE_MARGIN, PROBE_SETTLE_SECONDS,
                                              RAY_START_SECONDS, RECORDS_SECONDS, TRIAL_START_SECONDS)
from finesweep.search.budget.plan import Allowance, PlanInputs, budget_split, export_estimate
from finesweep.spaces import Quantization, SweepConfig, SweepFileError, Task
from finesweep.spaces.config import ExportConfig

# Under search.time_limit, the probe's share of it and the export's at most: a user who says 10 minutes wants them
# spent training, not measuring.
PROBE_SHARE = 0.1
EXPORT_SHARE = 1 / 3
# Below this many answers the generation scores are too noisy to compare variants by: none then, rather than 1 or 2.
MIN_ANSWERS = 4
BITSANDBYTES = {Quantization.int8, Quantization.nf4}
# What `finesweep run` spends outside the data, the probe, the search's budget and the export (measured.py).
LIMIT_OVERHEAD_SECONDS = RAY_START_SECONDS + RECORDS_SECONDS + EXIT_SECONDS


def probe_seconds(limit: float | None) -> float | None:
    """The probe's seconds under search.time_limit (None: no limit, the probe takes what it takes)."""
    return max(PROBE_SHARE * limit - PROBE_SETTLE_SECONDS, 0.0) if limit else None


def within_limit(config: SweepConfig, inputs: PlanInputs, limit: float, elapsed: float) -> Allowance:
    """What search.time_limit leaves the search after the `elapsed` seconds (data, probe) and the export's estimate
    (which does not depend on the search's budget; fit_export), with the sentence that says so; a SweepFileError,
    before anything trains, when that cannot pay for one trial's start and first evaluation."""
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
    every = budget_split(config, inputs, max(search, 1.0)).eval_every_steps  # the cadence the search's budget gives
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


def unused_words(plan: dict, phase_seconds: dict[str, float], wall_seconds: float) -> str | None:
    """After a run under search.time_limit, what it left of its limit and where the difference came from: the
    search's phase against its budget, the export's against its estimate (the rules' until this machine's exports
    calibrate it), and the share within_limit keeps spare by design. None without a limit, or past it (the
    predicted end and the real one are in summary.json either way)."""
    limit = plan.get("time_limit_seconds")
    if not limit or wall_seconds >= limit:
        return None
    predicted_export = plan.get("export_seconds") or 0.0
    spare = EXPORT_ESTIMATE_MARGIN * predicted_export + LIMIT_OVERHEAD_SECONDS
    unused = limit - wall_seconds
    return (f"{unused:.0f} s of the {limit:.0f} s limit unused ({unused / limit:.0%}): the search took "
            f"{phase_seconds.get('search', 0.0):.0f} s of its {plan.get('budget_seconds') or 0.0:.0f} s budget, the "
            f"export {phase_seconds.get('export', 0.0):.0f} s of the {predicted_export:.0f} s predicted, and "
            f"{spare:.0f} s were kept for Ray, the records, the exit and the export estimate's error")


def fit_export(export: ExportConfig, task: Task, estimate: Callable[[ExportConfig], float], seconds_left: float,
               cuda: bool) -> tuple[ExportConfig, str | None]:
    """The export as it will run, and the sentence that says what changed (None: nothing did). Where its `estimate`
    exceeds EXPORT_SHARE x `seconds_left`: export.quantization auto drops its bitsandbytes variants on a machine
    without CUDA (slower than full precision on a CPU, never the deploy pick there), then a causal LM's generated
    answers shrink to what fits (MIN_ANSWERS at least, or none), and if it still does not fit, auto's other variants
    go too and the answers are fitted again for the full-precision model alone. A list the file writes stands."""
    auto = export.quantization == "auto"
    export = export.resolved()
    cap = EXPORT_SHARE * seconds_left
    predicted = estimate(export)
    if predicted <= cap:
        return export, None
    changes = []
    fitted = export
    if not cuda and auto:
        kept = [q for q in export.quantization if q not in BITSANDBYTES]
        if kept and kept != export.quantization:
            left_out = ", ".join(q.value for q in export.quantization if q in BITSANDBYTES)
            fitted = fitted.model_copy(update={"quantization": kept})
            changes.append(f"{left_out} left out of export.quantization auto (bitsandbytes: slower than full "
                           "precision on a CPU)")
    answers = export.generation_samples if task == Task.causal_lm else 0
    fits = _answers_that_fit(fitted, estimate, cap, answers)
    if auto and fitted.quantization != [Quantization.none] and \
            estimate(fitted.model_copy(update={"generation_samples": fits})) > cap:
        dropped = ", ".join(q.value for q in fitted.quantization if q != Quantization.none)
        fitted = fitted.model_copy(update={"quantization": [Quantization.none]})
        changes.append(f"{dropped} left out too (the full-precision model alone: `finesweep export SWEEP --quantize "
                       f"{dropped.replace(', ', ',')}` makes them after the run; naming them in export.quantization "
                       "keeps them in it)")
        fits = _answers_that_fit(fitted, estimate, cap, answers)  # one variant answers: more of them fit
    if fits < answers:
        fitted = fitted.model_copy(update={"generation_samples": fits})
        changes.append(f"export.generation_samples {answers} -> {fits}")
    if not changes:
        return export, None
    return fitted, (f"the export, predicted at {predicted:.0f} s, is kept near a third of the {seconds_left:.0f} s "
                    f"the limit leaves ({estimate(fitted):.0f} s now): " + "; ".join(changes))


def _answers_that_fit(export: ExportConfig, estimate: Callable[[ExportConfig], float], cap: float,
                      answers: int) -> int:
    """How many of `answers` generated answers keep the export's estimate within `cap` (none below MIN_ANSWERS)."""
    if not answers:
        return 0

    def with_answers(count: int) -> float:
        return estimate(export.model_copy(update={"generation_samples": count}))

    without = with_answers(0)
    per_answer = (with_answers(answers) - without) / answers
    fits = min(answers, math.floor((cap - without) / per_answer)) if per_answer > 0 else answers
    return fits if fits >= MIN_ANSWERS else 0
