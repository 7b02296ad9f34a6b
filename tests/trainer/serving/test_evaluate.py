"""A test pass outside the Trainer: a causal LM's batches keep their logits small, and batching changes no score."""

from __future__ import annotations

import pytest

from finesweep.spaces import Task
from finesweep.trainer.models import load_checkpoint, with_pad_token
from finesweep.trainer.serving import evaluate as evaluation
from tests.exports import LABELS, causal_lm_collate, causal_lm_split, classification_collate, classification_split


def _recording(collate, sizes: list[int]):
    def collate_and_record(rows):
        sizes.append(len(rows))
        return collate(rows)
    return collate_and_record


def test_a_causal_lms_test_pass_holds_as_many_rows_as_its_logits_allow_and_scores_as_batch_32(tiny_causal_lm,
                                                                                              monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = with_pad_token(AutoTokenizer.from_pretrained(tiny_causal_lm))
    model = load_checkpoint(str(tiny_causal_lm), Task.causal_lm)
    split = causal_lm_split(tokenizer, 24)
    row_logits = 4 * model.config.vocab_size * max(len(ids) for ids in split["input_ids"])
    monkeypatch.setattr(evaluation, "LOGITS_BATCH_BYTES", 3 * row_logits + 1)  # three rows' logits fit, not four
    assert evaluation.scoring_batch_size(model, split, Task.causal_lm) == 3

    sizes: list[int] = []
    small = evaluation.evaluate(model, split, _recording(causal_lm_collate(tokenizer), sizes), Task.causal_lm)
    whole = evaluation.evaluate(model, split, causal_lm_collate(tokenizer), Task.causal_lm, batch_size=32)
    assert sizes[0] == evaluation.WARM_UP_ROWS and set(sizes[1:]) == {3} and sum(sizes[1:]) == len(split)
    assert small["perplexity"] == pytest.approx(whole["perplexity"], rel=1e-5)
    assert small["loss"] == pytest.approx(whole["loss"], rel=1e-5)

    monkeypatch.setattr(evaluation, "LOGITS_BATCH_BYTES", 1)  # not even one row's: one row a batch all the same
    assert evaluation.scoring_batch_size(model, split, Task.causal_lm) == 1


def test_a_classifiers_test_pass_keeps_batches_of_32(tiny_classifier):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    model = load_checkpoint(str(tiny_classifier), Task.classification, num_labels=len(LABELS))
    split = classification_split(tokenizer, 70)
    assert evaluation.scoring_batch_size(model, split, Task.classification) == evaluation.TEST_BATCH == 32
    sizes: list[int] = []
    evaluation.evaluate(model, split, _recording(classification_collate(tokenizer), sizes), Task.classification)
    assert sizes[1:] == [32, 32, 6]
