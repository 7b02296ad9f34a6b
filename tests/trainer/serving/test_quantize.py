"""Quantization (bitsandbytes int8 / NF4 on CPU), evaluation and prediction on tiny real models."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from finesweep.spaces import Quantization, Task
from tests.exports import LABELS, causal_lm_collate, causal_lm_split, classification_collate, classification_split

# --- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier_tokenizer(classifier_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(classifier_checkpoint)


@pytest.fixture(scope="module")
def lm_tokenizer(tiny_causal_lm):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@pytest.fixture(scope="module")
def quantized_classifiers(classifier_checkpoint, tmp_path_factory) -> dict[str, Path]:
    from finesweep.trainer.serving.quantize import quantize

    root = tmp_path_factory.mktemp("quantized-classifier")
    return {m: quantize(classifier_checkpoint, Quantization(m), root / m, Task.classification) for m in ("int8", "nf4")}


# --- quantize ------------------------------------------------------------------------------------------------


def _layer_types(model) -> dict[str, str]:
    import torch
    from transformers.pytorch_utils import Conv1D

    return {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))}


def _tensor_bytes(folder: Path, prefixes: list[str]) -> int:
    """Bytes stored in the folder's safetensors for the modules named by `prefixes` (weights + quant state)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        for key in handle.keys():
            if any(key.startswith(p + ".") for p in prefixes):
                tensor = handle.get_tensor(key)
                total += tensor.numel() * tensor.element_size()
    return total


@pytest.mark.parametrize("method, layer_class", [("int8", "Linear8bitLt"), ("nf4", "Linear4bit")])
def test_quantized_classifier_reloads_with_plain_transformers(quantized_classifiers, classifier_checkpoint, method, layer_class):
    from transformers import AutoModelForSequenceClassification

    folder = quantized_classifiers[method]
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    types = _layer_types(model)
    quantized = [name for name, kind in types.items() if kind == layer_class]
    assert types["classifier"] == "Linear"  # the head stays full precision
    assert quantized and set(types.values()) <= {layer_class, "Linear"}
    if method == "int8":  # int8 has no shape limits: every encoder layer is quantized
        assert len(quantized) == len(types) - 1
    else:  # NF4 quantizes exactly the layers bitsandbytes' CPU kernel can repack
        assert all(n.endswith("output.dense") and "attention" not in n for n in quantized)
    assert _tensor_bytes(folder, quantized) < 0.5 * _tensor_bytes(classifier_checkpoint, quantized)
    assert model.config.id2label == dict(enumerate(LABELS))
    assert (folder / "tokenizer.json").exists() and not list(folder.glob("*.bin"))


@pytest.mark.parametrize("method", ["int8", "nf4"])
def test_quantized_classifier_agrees_with_full(quantized_classifiers, classifier_checkpoint, classifier_tokenizer, method):
    import torch
    from transformers import AutoModelForSequenceClassification

    full = AutoModelForSequenceClassification.from_pretrained(classifier_checkpoint).eval()
    quant = AutoModelForSequenceClassification.from_pretrained(quantized_classifiers[method]).eval()
    batch = classification_collate(classifier_tokenizer)([dict(r) for r in classification_split(classifier_tokenizer, 128)])
    batch.pop("labels")
    with torch.no_grad():  # bitsandbytes' model loads onto the GPU where there is one; the full model stays here
        full_labels = full(**batch).logits.argmax(-1)
        quant_labels = quant(**{k: v.to(quant.device) for k, v in batch.items()}).logits.argmax(-1).cpu()
    # Agreement means something only if the full model tells the inputs apart: a model that answers one class for
    # everything would agree with any other that does the same.
    counts = torch.bincount(full_labels, minlength=len(LABELS))
    assert (counts > 0).sum().item() >= 2 and counts.max().item() <= 0.8 * len(full_labels), counts.tolist()
    agree = (full_labels == quant_labels).float().mean().item()
    assert agree >= 0.9
    for label in full_labels.unique():  # and it holds within each class the full model predicts, not only overall
        mine = full_labels == label
        assert (quant_labels[mine] == label).float().mean().item() >= 0.8, (LABELS[label], counts.tolist())


@pytest.mark.parametrize("method", ["int8", "nf4"])
def test_quantized_causal_lm_loss_close_to_full(tiny_causal_lm, lm_tokenizer, tmp_path, method):
    from transformers import AutoModelForCausalLM

    from finesweep.trainer.serving.evaluate import evaluate
    from finesweep.trainer.serving.quantize import quantize

    folder = quantize(tiny_causal_lm, Quantization(method), tmp_path / method, Task.causal_lm)
    quant = AutoModelForCausalLM.from_pretrained(folder)
    kinds = set(_layer_types(quant).values())
    assert {"Linear8bitLt" if method == "int8" else "Linear4bit"} <= kinds
    assert _layer_types(quant)["lm_head"] == "Linear"  # tied to the input embeddings: never quantized
    split, collate = causal_lm_split(lm_tokenizer), causal_lm_collate(lm_tokenizer)
    full_loss = evaluate(AutoModelForCausalLM.from_pretrained(tiny_causal_lm), split, collate, Task.causal_lm)["loss"]
    quant_loss = evaluate(quant, split, collate, Task.causal_lm)["loss"]
    assert abs(quant_loss - full_loss) < 0.02 * full_loss


def test_quantize_none_is_an_error(tiny_causal_lm, tmp_path):
    from finesweep.trainer.serving.quantize import quantize

    with pytest.raises(ValueError, match="needs a quantization method"):
        quantize(tiny_causal_lm, Quantization.none, tmp_path / "x", Task.causal_lm)


# --- evaluate ------------------------------------------------------------------------------------------------


def test_evaluate_classification_metrics(classifier_checkpoint, classifier_tokenizer):
    import torch
    from transformers import AutoModelForSequenceClassification

    from finesweep.trainer.serving.evaluate import evaluate, evaluate_rows, longest_first_order

    model = AutoModelForSequenceClassification.from_pretrained(classifier_checkpoint)
    split = classification_split(classifier_tokenizer, 50)
    metrics = evaluate(model, split, classification_collate(classifier_tokenizer), Task.classification, batch_size=16)
    assert set(metrics) == {"accuracy", "f1_macro", "loss", "latency_ms_per_sample"}
    assert metrics["accuracy"] > 0.5  # trained: well above the 1/3 of guessing
    assert 0 <= metrics["f1_macro"] <= 1 and metrics["loss"] > 0 and metrics["latency_ms_per_sample"] > 0
    # Taken longest first (batches of similar lengths pad little): the same metrics as one row at a time.
    ordered = split.select(longest_first_order(split))
    assert [len(ids) for ids in ordered["input_ids"]] == sorted((len(ids) for ids in split["input_ids"]), reverse=True)
    alone = evaluate(model, split, classification_collate(classifier_tokenizer), Task.classification, batch_size=1)
    assert (alone["accuracy"], alone["f1_macro"]) == (metrics["accuracy"], metrics["f1_macro"])
    assert alone["loss"] == pytest.approx(metrics["loss"], rel=1e-4)
    # Each row's part in the accuracy, back in the split's order (measured longest first): what a paired comparison
    # of two models on the same rows needs.
    same, rows = evaluate_rows(model, split, classification_collate(classifier_tokenizer), Task.classification)
    assert same["accuracy"] == metrics["accuracy"] and rows.values.mean() == pytest.approx(metrics["accuracy"])
    with torch.no_grad():
        logits = [model(input_ids=torch.tensor([row["input_ids"]])).logits for row in split]
    right = [float(int(row_logits.argmax()) == row["labels"]) for row_logits, row in zip(logits, split)]
    assert rows.values.tolist() == right and rows.weights.tolist() == [1.0] * len(split)


def test_evaluate_causal_lm_is_token_weighted(tiny_causal_lm, lm_tokenizer):
    from transformers import AutoModelForCausalLM

    from finesweep.trainer.serving.evaluate import evaluate, evaluate_rows

    model = AutoModelForCausalLM.from_pretrained(tiny_causal_lm)
    split, collate = causal_lm_split(lm_tokenizer, 10), causal_lm_collate(lm_tokenizer)
    one = evaluate(model, split, collate, Task.causal_lm, batch_size=1)
    many = evaluate(model, split, collate, Task.causal_lm, batch_size=3)  # uneven batches, padded rows
    assert set(one) == {"loss", "perplexity", "latency_ms_per_sample"}
    assert many["loss"] == pytest.approx(one["loss"], rel=1e-4)
    assert one["perplexity"] == pytest.approx(math.exp(one["loss"]))
    # Each row's summed loss and response tokens, in the split's order: alone, a row's loss is their ratio.
    _, rows = evaluate_rows(model, split, collate, Task.causal_lm, batch_size=3)
    assert rows.values.sum() / rows.weights.sum() == pytest.approx(one["loss"], rel=1e-4)
    for index in (0, 4, 9):
        single = evaluate(model, split.select([index]), collate, Task.causal_lm, batch_size=1)
        assert rows.values[index] / rows.weights[index] == pytest.approx(single["loss"], rel=1e-4)


def test_folder_size_counts_only_safetensors(tmp_path):
    from finesweep.trainer.serving.evaluate import folder_size_bytes

    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    (tmp_path / "config.json").write_text("{}")
    assert folder_size_bytes(tmp_path) == 100


# --- predict -------------------------------------------------------------------------------------------------


def test_predict_causal_lm_quantized_folder(tiny_causal_lm, tmp_path):
    from finesweep.trainer.serving.predict import folder_task, predict
    from finesweep.trainer.serving.quantize import quantize

    folder = quantize(tiny_causal_lm, Quantization.int8, tmp_path / "int8", Task.causal_lm)
    assert folder_task(folder) == Task.causal_lm
    out = predict(folder, ["name the colour red", "hello"])
    assert len(out) == 2 and all(isinstance(o["generated"], str) for o in out)


def test_predict_classification_labels(quantized_classifiers):
    from finesweep.trainer.serving.predict import predict

    out = predict(quantized_classifiers["nf4"], ["i love this great movie", "awful and sad"])
    assert [set(o) for o in out] == [{"label", "score"}] * 2
    assert all(o["label"] in LABELS and 0 < o["score"] <= 1 for o in out)


def test_speed_timing_warms_up_then_stops_at_its_repeats_or_its_time_budget():
    import time

    import torch

    from finesweep.trainer.serving.evaluate import median_seconds

    calls = []

    def work() -> None:
        calls.append(1)
        time.sleep(0.05 if len(calls) > 1 else 0.3)  # the untimed first run is the slow one, and is not counted

    assert median_seconds(work, torch.device("cpu"), repeats=5, budget=0.12) < 0.2
    assert len(calls) == 4  # the warm-up, then three timed runs: 0.15 s passes the 0.12 s budget
    calls.clear()
    median_seconds(work, torch.device("cpu"), repeats=2, budget=10.0)
    assert len(calls) == 3  # the warm-up and the two repeats asked for
