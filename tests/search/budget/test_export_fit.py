"""Under a time limit the export is kept near a third of what the limit leaves (search/budget/limit.py)."""

from __future__ import annotations

from finesweep.search.budget.limit import fit_export
from finesweep.spaces import SweepConfig, Task
from finesweep.spaces.config import ExportConfig


def _config(task: str = "causal_lm", **export) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "x", "data": {"path": "chats.jsonl", "task": task}, "models": [{"name": "m", "path": "m"}],
        "search": {"time_limit": "10m"}, "export": export})


def _fit(config: SweepConfig, seconds_left: float, cuda: bool = False) -> tuple[ExportConfig, str | None]:
    return fit_export(config.export, config.data.task, _estimate, seconds_left, cuda)


def _estimate(export: ExportConfig) -> float:
    """A causal LM's export as the LLM example's: 40 s per variant's test pass and timing, 60 s for the ONNX graph,
    4 s per generated answer and variant (bitsandbytes' int8 twice that: it decodes slower than full precision)."""
    variants = ["none", *(q.value for q in export.resolved().quantization if q.value != "none")]
    answers = export.generation_samples
    per_answer = {"int8": 8.0}
    return sum(40 + per_answer.get(v, 4.0) * answers + (60 if v == "onnx-int8" else 0) for v in variants)


def test_an_auto_export_on_a_cpu_drops_bitsandbytes_then_answers_until_it_fits_a_third():
    config = _config()  # int8 and onnx-int8, 32 answers: 40x3 + 60 + 32x(4+8+4) = 692 s
    assert _estimate(config.export) == 692
    fitted, said = _fit(config, seconds_left=600)
    assert [q.value for q in fitted.quantization] == ["onnx-int8"]
    # Without int8: 140 + 8 per answer; a third of 600 s holds 7 answers.
    assert fitted.generation_samples == 7 and _estimate(fitted) <= 200
    assert "int8 left out of export.quantization auto" in said and "generation_samples 32 -> 7" in said
    assert said.startswith("the export, predicted at 692 s, is kept near a third of the 600 s")


def test_an_auto_export_that_still_does_not_fit_keeps_the_full_precision_model_alone_with_the_answers_it_fits():
    fitted, said = _fit(_config(), seconds_left=300)  # a 100 s cap: 140 s without answers
    # The full-precision model alone: 40 s and 4 s an answer, so 15 of the 32 answers fit (with onnx-int8 none did).
    assert [q.value for q in fitted.quantization] == ["none"] and fitted.generation_samples == 15
    assert _estimate(fitted) == 100 and "--quantize onnx-int8` makes them after the run" in said
    assert said.endswith("export.generation_samples 32 -> 15")


def test_a_list_the_file_names_is_kept_a_gpu_keeps_bitsandbytes_and_too_few_answers_become_none():
    named = _config(quantization=["onnx-int8", "int8"])
    fitted, said = _fit(named, seconds_left=600)
    assert [q.value for q in fitted.quantization] == ["onnx-int8", "int8"]
    # 180 s without answers leaves the 200 s cap room for one answer (16 s): fewer than MIN_ANSWERS, so none.
    assert fitted.generation_samples == 0 and "32 -> 0" in said
    written, _ = _fit(_config(quantization=["int8", "onnx-int8"]), seconds_left=600)
    assert [q.value for q in written.quantization] == ["int8", "onnx-int8"], "auto's list, written out, stands"
    on_gpu, _ = _fit(_config(), seconds_left=600, cuda=True)
    assert [q.value for q in on_gpu.quantization] == ["int8", "onnx-int8"]


def test_an_export_that_fits_or_a_classifier_is_left_as_it_is():
    roomy = _config()
    assert _fit(roomy, seconds_left=3000) == (roomy.export.resolved(), None), "auto: int8 and onnx-int8"
    classifier = _config(task="classification", quantization=["onnx-int8"])
    kept = fit_export(classifier.export, Task.classification, _estimate, 150, cuda=False)
    assert kept == (classifier.export, None), \
        "nothing to take away: the variants were named and a classifier generates nothing"
