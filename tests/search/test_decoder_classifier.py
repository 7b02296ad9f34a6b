"""A decoder (the tiny Llama, its tokenizer GPT-2's kind: no pad token, nothing between a pair's texts) as a
classifier under transformers' own head, from the memory probe to the export: text pairs, the hardest of its paths.
A file of its own, so pytest-xdist runs its sweep beside the encoder's pairs (test_text_pairs.py)."""

from __future__ import annotations

import json

import pytest

from tests import tiny
from tests.search.test_text_pairs import PAIR_SWEEP, pair_rows
from tests.sweeps import finesweep, git_commit


@pytest.fixture(scope="module")
def decoder_pair_sweep(tmp_path_factory):
    """test_text_pairs.py's pairs on the tiny Llama, one trial."""
    folder = tmp_path_factory.mktemp("decoder-pairs")
    tiny.build_tiny_llama(folder / "model")
    tiny.write_csv(folder / "pairs.csv", pair_rows(400))
    one_trial = PAIR_SWEEP.replace("num_trials: 2", "num_trials: 1")
    (folder / "sweep.yaml").write_text(one_trial.replace("{name: tiny, path: model, pooling: mean}",
                                                         "{name: tiny, path: model}"))
    git_commit(folder)
    result = finesweep("run", "sweep.yaml", cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, folder / "runs" / "pairs" / "export"


def test_a_decoder_classifies_text_pairs_with_its_end_of_sequence_token_between_the_texts(decoder_pair_sweep):
    """The probe pads a decoder's batches as the trials do (its eos), and the pair's texts are told apart by the
    separator the tokenizer saved with every variant puts between them."""
    from transformers import AutoTokenizer

    folder, export = decoder_pair_sweep
    metrics = json.loads((export / "metrics.json").read_text())
    assert metrics["full"]["accuracy"] > 0.5, metrics  # the label is in the second text only: chance is a third
    assert abs(metrics["onnx-int8"]["accuracy"] - metrics["full"]["accuracy"]) <= 0.05, metrics
    for variant in ["model", "model-onnx-int8"]:
        tokenizer = AutoTokenizer.from_pretrained(export / variant)
        first, second = tokenizer("so happy")["input_ids"], tokenizer("awful")["input_ids"]
        assert tokenizer("so happy", "awful")["input_ids"] == first + [tokenizer.eos_token_id] + second, variant
        result = finesweep("predict", str(export / variant), "i was there", "--pair", "so happy great", cwd=folder)
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout.strip().split(" -> ")[1])["label"] in {"positive", "negative", "neutral"}
