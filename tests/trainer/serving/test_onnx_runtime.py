"""onnx-int8: the tiny classifier exported by torch's ONNX exporter, quantized by ONNX Runtime, then loaded the way
its users load it (an onnxruntime InferenceSession and the folder's tokenizer), by finesweep's evaluation, and by
`finesweep predict`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from finesweep.spaces import Quantization, Task
from tests.exports import LABELS, classification_collate, classification_split


@pytest.fixture(scope="module")
def onnx_classifier(classifier_checkpoint, tmp_path_factory) -> Path:
    from finesweep.trainer.serving.quantize import quantize

    return quantize(classifier_checkpoint, Quantization.onnx_int8, tmp_path_factory.mktemp("onnx") / "model-onnx-int8",
                    Task.classification)


def _full_logits(checkpoint: Path, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        return model(**AutoTokenizer.from_pretrained(checkpoint)(texts, padding=True, return_tensors="pt")).logits.numpy()


def _texts(n: int = 128) -> list[str]:
    from tests import tiny

    return [row["text"] for row in tiny.sentiment_rows(n, seed=1)]


def test_the_folder_holds_an_int8_graph_its_labels_and_tokenizer(onnx_classifier, classifier_checkpoint):
    import onnx

    names = {p.name for p in onnx_classifier.iterdir()}
    assert {"model.onnx", "config.json", "tokenizer.json"} <= names and not list(onnx_classifier.glob("*.safetensors"))
    graph = onnx.load(str(onnx_classifier / "model.onnx"))
    ops = {node.op_type for node in graph.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} & ops, ops  # ONNX Runtime's dynamic int8 matrix products
    # The head stays float32, as in every quantized variant (the quantizer stores its weight transposed).
    head = {t.name: t.data_type for t in graph.graph.initializer if t.name.startswith("classifier.weight")}
    assert head and set(head.values()) == {onnx.TensorProto.FLOAT}, head
    # Every other linear layer multiplies in int8 (on this tiny model the graph's own size outweighs the weights, so
    # the bytes saved are shown on the example's model in benchmarks/quantize/).
    import torch
    from transformers import AutoModelForSequenceClassification

    linear = [m for m in AutoModelForSequenceClassification.from_pretrained(classifier_checkpoint).modules()
              if isinstance(m, torch.nn.Linear)]
    assert sum(node.op_type == "MatMulInteger" for node in graph.graph.node) == len(linear) - 1


def test_an_onnxruntime_session_answers_as_the_full_model(onnx_classifier, classifier_checkpoint):
    """The model card's own snippet, run as a user runs it: session, tokenizer, labels from config.json."""
    import onnxruntime
    from transformers import AutoConfig, AutoTokenizer

    texts = _texts()
    session = onnxruntime.InferenceSession(str(onnx_classifier / "model.onnx"))
    inputs = AutoTokenizer.from_pretrained(onnx_classifier)(texts, padding=True, return_tensors="np")
    logits = session.run(["logits"], {i.name: inputs[i.name] for i in session.get_inputs()})[0]
    full = _full_logits(classifier_checkpoint, texts).argmax(-1)
    quantized = logits.argmax(-1)
    counts = np.bincount(full, minlength=len(LABELS))
    assert (counts > 0).sum() >= 2 and counts.max() <= 0.8 * len(full), counts  # the full model tells texts apart
    assert (quantized == full).mean() >= 0.9
    for label in np.unique(full):  # and the agreement holds within each class the full model predicts
        assert (quantized[full == label] == label).mean() >= 0.8, (LABELS[label], counts)
    assert np.abs(logits - _full_logits(classifier_checkpoint, texts)).max() < 0.5  # int8 rounding, not another model
    id2label = AutoConfig.from_pretrained(onnx_classifier).id2label
    assert {id2label[int(i)] for i in quantized} <= set(LABELS)


def test_the_model_cards_onnx_snippet_runs(onnx_classifier):
    """The card's snippet, run as written: its label for "an example" is the one finesweep's own ONNX prediction
    gives, and its logits have one column per label."""
    from finesweep.search.outputs.card_loading import onnx_usage
    from finesweep.trainer.serving.predict import predict

    code = re.search(r"```python\n(.*?)```", "\n".join(onnx_usage(str(onnx_classifier))), re.S).group(1)
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - our own card's text, on our own test folder
    assert scope["logits"].shape == (1, len(LABELS))
    assert scope["labels"] == [predict(onnx_classifier, ["an example"])[0]["label"]]


def test_evaluation_and_predict_load_the_folder_through_onnxruntime(onnx_classifier, classifier_checkpoint):
    from transformers import AutoTokenizer

    from finesweep.trainer.serving.evaluate import evaluate, serving_speed
    from finesweep.trainer.models import load_checkpoint
    from finesweep.trainer.serving.loader import load_exported
    from finesweep.trainer.serving.onnx_runtime import OnnxClassifier
    from finesweep.trainer.serving.predict import predict

    tokenizer = AutoTokenizer.from_pretrained(classifier_checkpoint)
    split, collate = classification_split(tokenizer, 64), classification_collate(tokenizer)
    model = load_exported(onnx_classifier, Task.classification)
    assert isinstance(model, OnnxClassifier)
    quantized = evaluate(model, split, collate, Task.classification)
    full = evaluate(load_checkpoint(str(classifier_checkpoint), Task.classification), split, collate, Task.classification)
    assert abs(quantized["accuracy"] - full["accuracy"]) <= 0.05 and quantized["loss"] == pytest.approx(full["loss"], abs=0.05)
    speed = serving_speed(model, split, collate)
    assert speed["latency_ms_batch1"] > 0 and speed["ms_per_sample_batch32"] > 0
    out = predict(onnx_classifier, ["i love this great movie", "awful and sad"])
    assert [o["label"] in LABELS and 0 < o["score"] <= 1 for o in out] == [True, True]


def test_the_auto_export_list_has_the_fast_variant_for_both_tasks(tmp_path):
    from finesweep.spaces.config import SweepConfig

    def unset(task: str) -> list[str]:
        config = SweepConfig.model_validate({"name": "x", "data": {"path": "x.csv", "task": task},
                                             "models": [{"name": "m", "path": str(tmp_path)}]})
        assert config.export.quantization == "auto"
        return [q.value for q in config.export.resolved().quantization]

    assert unset("classification") == ["int8", "onnx-int8"] and unset("causal_lm") == ["int8", "onnx-int8"]


def test_a_decoders_classifier_that_keeps_its_cache_exports_its_logits(tiny_llama, tmp_path):
    """A LoRA winner merged into a Llama base keeps `use_cache: true` in its config: its forward pass would return the
    key/value cache too, which torch's exporter cannot trace."""
    import onnxruntime
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from finesweep.trainer.serving.onnx_runtime import export_int8

    full = tmp_path / "model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_llama, num_labels=len(LABELS),
                                                               pad_token_id=tokenizer.pad_token_id, use_cache=True)
    model.save_pretrained(full)
    tokenizer.save_pretrained(full)

    session = onnxruntime.InferenceSession(str(export_int8(full, tmp_path / "model-onnx-int8") / "model.onnx"))
    assert [output.name for output in session.get_outputs()] == ["logits"]
    texts = _texts(8)
    encoded = tokenizer(texts, padding=True, return_tensors="np")
    logits = session.run(None, {name: encoded[name] for name in ("input_ids", "attention_mask")})[0]
    assert logits.shape == (8, len(LABELS))
    assert np.abs(logits - _full_logits(full, texts)).max() < 0.1  # int8 weights: close to full precision's
