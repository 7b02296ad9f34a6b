"""The export kept to a share of a time limit: a user who says 10 minutes wants them spent on the search and the
winner, not on measuring the result.

Where the predicted export exceeds EXPORT_SHARE of what the limit leaves after the data and the probe:
export.quantization auto drops its bitsandbytes variants on a machine without CUDA (slower than full precision on a
CPU, never the deploy pick there), then a causal LM's generated answers shrink to what fits (at least MIN_ANSWERS while any fit), and if it
still does not fit, auto's other variants go too and the answers are fitted again for the full-precision model alone.
A list the file writes stands. The plan says what changed. Pure: the estimate comes from the `estimate` given.
"""

from __future__ import annotations

import math
from typing import Callable

from finesweep.spaces import Quantization, Task
from finesweep.spaces.config import ExportConfig

EXPORT_SHARE = 1 / 3
# Below this many answers the generation scores are too noisy to compare variants by: none then, rather than 1 or 2.
MIN_ANSWERS = 4
BITSANDBYTES = {Quantization.int8, Quantization.nf4}


def fit_export(export: ExportConfig, task: Task, estimate: Callable[[ExportConfig], float], seconds_left: float,
               cuda: bool) -> tuple[ExportConfig, str | None]:
    """The export as it will run: the file's `export`, lightened to an estimate within EXPORT_SHARE x
    `seconds_left` where it can be made so, and the sentence that says what changed (None: nothing did). The
    file's section is read, never written."""
    auto = export.quantization == "auto"  # a list the sweep file names stands
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
