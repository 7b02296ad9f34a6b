"""A sequence classifier on the mean of a BERT encoder's token states (a sweep file's `pooling: mean`).

transformers' BertForSequenceClassification reads the first token ([CLS]) through the pretraining pooler.
Sentence-transformers checkpoints such as all-MiniLM were trained to embed a text as the mean of its token states
and never trained [CLS] to summarise it, so a head on the mean starts from a useful summary and learns 1.5 to 2 times
as fast on them (benchmarks/quickstart/one_trial.py). transformers has no class for it; this is that class.

This file is copied into every saved folder of such a model (transformers' custom-code mechanism: `auto_map` in
config.json), so it imports torch and transformers only. Plain transformers loads the folder with
`trust_remote_code=True`; without it the load fails (the model type is unknown to transformers) rather than
silently reading [CLS]. finesweep registers the classes itself and never runs the folder's copy.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import BertConfig, BertModel, BertPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class MeanPooledBertConfig(BertConfig):
    """A BERT configuration whose model type names the mean-pooled head (and nothing else changes)."""

    model_type = "finesweep_mean_pooled_bert"


class MeanPooledBertForSequenceClassification(BertPreTrainedModel):
    """BERT encoder (without its [CLS] pooler), the mean of the token states the attention mask keeps, dropout, and
    a linear layer: the weights keep BertForSequenceClassification's names (`bert.*`, `classifier`)."""

    config_class = MeanPooledBertConfig

    def __init__(self, config: MeanPooledBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        kwargs.pop("return_dict", None)  # callers such as peft pass it; the head needs the encoder's dict output
        outputs = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, return_dict=True, **kwargs)
        logits = self.classifier(self.dropout(masked_mean(outputs.last_hidden_state, attention_mask)))
        loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean over the positions the mask keeps (padding never counts, so a row's result does not depend on how
    far its batch was padded)."""
    if attention_mask is None:
        return hidden.mean(dim=1)
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
