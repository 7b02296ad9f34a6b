"""The export kept to a share of a time limit: a user who says 10 minutes means 10 minutes, and the search and the
winner's training, not the measuring of the result, should have most of them.

On 2 cores the LLM example's export was predicted at 377 s of a 10-minute limit (it took 271 s): three variants,
each scoring the test split and greedily answering the 16 test prompts token by token, bitsandbytes' int8 among
them, which on a CPU is slower than full precision (0.57x its decode speed there) and never the deploy pick. So
where the predicted export exceeds EXPORT_SHARE of what the limit leaves after the data and the probe: first the
bitsandbytes variants leave a default export list on a machine without CUDA (a list the sweep file names is kept),
then a causal LM's generated answers shrink to what fits (at least MIN_ANSWERS while any fit), and if it still does
not fit, a default list's other variants go too (a causal LM's ONNX graph alone is planned at 180 s on 2 cores) and
the answers are fitted again for the full-precision model alone. The plan says what changed. Pure: the export's estimate comes from the `estimate` given.
"""

from __future__ import annotations

import math
from typing import Callable

from finesweep.spaces import Quantization, Task
from finesweep.spaces.config import DEFAULT_QUANTIZATION, ExportConfig

EXPORT_SHARE = 1 / 3
# Below this many answers the generation scores are too noisy to compare variants by: none then, rather than 1 or 2.
MIN_ANSWERS = 4
BITSANDBYTES = {Quantization.int8, Quantization.nf4}


def fit_export(export: ExportConfig, task: Task, estimate: Callable[[ExportConfig], float], seconds_left: float,
               cuda: bool) -> tuple[ExportConfig, str | None]:
    """The export as it will run: the file's `export`, lightened to an estimate within EXPORT_SHARE x
    `seconds_left` where it can be made so, and the sentence that says what changed (None: nothing did). The
    file's section is read, never written."""
    cap = EXPORT_SHARE * seconds_left
    predicted = estimate(export)
    if predicted <= cap:
        return export, None
    changes = []
    fitted = export
    # Compared with the default: a list the sweep file names is kept.
    default_list = export.quantization == DEFAULT_QUANTIZATION
    if not cuda and default_list:
        kept = [q for q in export.quantization if q not in BITSANDBYTES]
        if kept and kept != export.quantization:
            left_out = ", ".join(q.value for q in export.quantization if q in BITSANDBYTES)
            fitted = fitted.model_copy(update={"quantization": kept})
            changes.append(f"{left_out} left out of the default export.quantization (bitsandbytes: slower than full "
                           "precision on a CPU)")
    answers = export.generation_samples if task == Task.causal_lm else 0
    fits = _answers_that_fit(fitted, estimate, cap, answers)
    if default_list and fitted.quantization != [Quantization.none] and \
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
