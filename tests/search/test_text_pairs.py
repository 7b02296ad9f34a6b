"""data.text_pair_column: a classifier of text pairs, from the data to the export, `predict` and the model card."""

from __future__ import annotations

import json
import random

import pytest

from tests import tiny
from tests.sweeps import finesweep, git_commit

PAIR_SWEEP = """
name: pairs
seed: 1
output_root: runs
data:
  path: pairs.csv
  text_column: first
  text_pair_column: second
  splits: {train: 0.7, validation: 0.15, test: 0.15}
models: [{name: tiny, path: model, pooling: mean}]   # the example's head
space:
  learning_rate: {low: 2.0e-3, high: 4.0e-3, log: true}
  effective_batch_size: [8]
  precision: [fp32]
  freeze_embeddings: false   # the tiny encoder's are random: frozen, it learns nothing in these steps
search:
  algorithm: random
  scheduler: none
  plateau_patience: null
  baseline: "off"
  num_trials: 2
  metric: eval_accuracy
  mode: max
  eval_every_steps: 20
  max_steps: 80
resources: {cpus_per_trial: 1, memory_budget: 4GiB}
export: {quantization: [onnx-int8]}
"""


def pair_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """The label is the sentiment of the second text; the first carries the words of a class drawn apart from it,
    so a classifier that read only the first text would score chance (a third)."""
    rng = random.Random(seed)
    rows = []
    for row in tiny.sentiment_rows(n, seed):
        decoy = rng.choice(sorted(tiny.WORDS))
        first = " ".join(rng.sample(tiny.FILLER, 2) + rng.sample(tiny.WORDS[decoy], 2))
        rows.append({"first": first, "second": row["text"], "label": row["label"]})
    return rows


@pytest.fixture(scope="module")
def pair_sweep(tmp_path_factory):
    folder = tiny.classification_folder(tmp_path_factory.mktemp("pairs"), PAIR_SWEEP)
    rows = pair_rows(400) + [{"first": "left alone", "second": "", "label": "positive"}]
    tiny.write_csv(folder / "pairs.csv", rows)
    git_commit(folder)
    result = finesweep("run", "sweep.yaml", cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, folder / "runs" / "pairs" / "export", result.stdout


def test_a_classifier_of_text_pairs_learns_from_the_second_text_and_every_variant_reads_both(pair_sweep):
    _, export, _ = pair_sweep
    metrics = json.loads((export / "metrics.json").read_text())
    assert metrics["full"]["accuracy"] > 0.6, metrics  # the label is in the second text only: chance is a third
    assert abs(metrics["onnx-int8"]["accuracy"] - metrics["full"]["accuracy"]) <= 0.05, metrics
    for folder in ["model", "model-onnx-int8"]:
        config = json.loads((export / folder / "config.json").read_text())
        assert config["finesweep_text_pair"] == ["first", "second"], folder
    import onnxruntime

    session = onnxruntime.InferenceSession(str(export / "model-onnx-int8" / "model.onnx"))
    assert [entry.name for entry in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]


def test_the_data_report_and_the_card_speak_of_pairs(pair_sweep):
    _, export, console = pair_sweep
    assert "dropped 1 (empty), e.g. 'left alone | (empty) | positive'" in console  # which of the two was empty
    card = (export / "README.md").read_text()
    assert "columns: text pairs `first` and `second`, label `label`" in card
    assert 'tokenizer(["a first text"], ["its second text"], return_tensors="np")' in card


def test_predict_takes_each_texts_pair_and_refuses_a_pair_model_without_them(pair_sweep):
    folder, export, _ = pair_sweep
    for variant in ["model", "model-onnx-int8"]:
        result = finesweep("predict", str(export / variant), "i was there", "it was there", "--pair",
                           "so happy great best love", "--pair", "awful worst hate sad", cwd=folder)
        assert result.returncode == 0, result.stderr[-2000:]
        lines = result.stdout.strip().splitlines()
        assert lines[0].startswith("'i was there' + 'so happy great best love' -> ") and len(lines) == 2
        assert [json.loads(line.split(" -> ")[1])["label"] for line in lines] == ["positive", "negative"], lines
    missing = finesweep("predict", str(export / "model"), "only one text", cwd=folder)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "classifies text pairs (trained on columns 'first' and 'second')" in missing.stderr
    assert "--pair gave none" in missing.stderr
