"""space.dropout: every dropout rate of the model set at load, whatever its architecture calls them."""

from __future__ import annotations

import torch
from transformers import AutoConfig

from finesweep.spaces import ModelCandidate, Task
from finesweep.trainer.models import TrainingSetup, dropout_overrides, load_trainable

LABELS = ["negative", "neutral", "positive"]


def _dropout_rates(model: torch.nn.Module) -> set[float]:
    return {module.p for module in model.modules() if isinstance(module, torch.nn.Dropout)}


def test_every_dropout_field_of_bert_gpt2_and_llama_configs_is_named(tiny_classifier, tiny_causal_lm, tiny_llama):
    def fields(folder):
        return dropout_overrides(ModelCandidate(name="m", path=str(folder)), 0.0, False)

    assert fields(tiny_classifier) == {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                                       "classifier_dropout": 0.0}
    assert {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"} <= set(fields(tiny_causal_lm))
    assert "attention_dropout" in fields(tiny_llama)
    assert dropout_overrides(ModelCandidate(name="m", path=str(tiny_classifier)), None, False) == {}


def test_a_model_loaded_with_a_dropout_has_it_in_every_layer_and_in_its_saved_config(tiny_classifier, tmp_path):
    candidate = ModelCandidate(name="t", path=str(tiny_classifier))
    assert _dropout_rates(load_trainable(candidate, Task.classification, LABELS, TrainingSetup())) == {0.1}
    for pooling in (None, "mean"):
        chosen = candidate.model_copy(update={"pooling": pooling})
        model = load_trainable(chosen, Task.classification, LABELS, TrainingSetup(dropout=0.0))
        assert _dropout_rates(model) == {0.0}, pooling
    model.save_pretrained(tmp_path)
    saved = AutoConfig.from_pretrained(tmp_path)
    assert (saved.hidden_dropout_prob, saved.attention_probs_dropout_prob, saved.classifier_dropout) == (0.0, 0.0, 0.0)
    # Without dropout, the training forward pass is deterministic: two passes give the same logits.
    model.train()
    ids = torch.randint(5, 200, (2, 12))
    first, second = (model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits for _ in range(2))
    assert torch.equal(first, second)
