"""Model and tokenizer loading for every kind of candidate: a local folder, a hub id, or a GGUF file."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from finesweep.spaces import ModelCandidate, Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# The transformers auto class a model of each task loads with (by name: the model card writes it in its code).
AUTO_CLASS_NAMES = {Task.classification: "AutoModelForSequenceClassification", Task.causal_lm: "AutoModelForCausalLM"}


def auto_model_class(task: Task | str) -> Any:
    """The transformers auto class a model of `task` loads with."""
    import transformers

    return getattr(transformers, AUTO_CLASS_NAMES[Task(task)])


def with_pad_token(tokenizer: "PreTrainedTokenizerBase", name: str = "") -> "PreTrainedTokenizerBase":
    """A tokenizer without a pad token pads with its end-of-sequence token (set on the tokenizer, so a tokenizer saved
    with a model pads the way the trials did)."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        log.info("%s: tokenizer has no pad token; padding with its end-of-sequence token", name or "model")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_source(candidate: ModelCandidate, trust_remote_code: bool) -> tuple[str, dict[str, Any]]:
    """What from_pretrained is given: the folder or hub id, and the keyword arguments every load shares."""
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if candidate.gguf_file:
        kwargs["gguf_file"] = candidate.gguf_file
    if candidate.revision:
        kwargs["revision"] = candidate.revision
    return candidate.path or candidate.hub_id, kwargs  # type: ignore[return-value]


def load_tokenizer(candidate: ModelCandidate, trust_remote_code: bool = False) -> "PreTrainedTokenizerBase":
    """The candidate's own tokenizer; a tokenizer without a pad token pads with its end-of-sequence token."""
    from transformers import AutoTokenizer

    source, kwargs = model_source(candidate, trust_remote_code)
    return with_pad_token(AutoTokenizer.from_pretrained(source, **kwargs), candidate.name)


def load_model(
    candidate: ModelCandidate,
    task: Task,
    label_names: list[str] | None = None,
    trust_remote_code: bool = False,
    **extra: Any,
) -> "PreTrainedModel":
    """Load the candidate for `task`; classification gets a head sized and named by `label_names`."""
    source, kwargs = model_source(candidate, trust_remote_code)
    kwargs.update(candidate.config_overrides)
    kwargs.update(extra)
    if task == Task.classification:
        if not label_names:
            raise ValueError("a classification model needs the label names of the data")
        kwargs.update(
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: i for i, name in enumerate(label_names)},
        )
    return auto_model_class(task).from_pretrained(source, **kwargs)


def load_checkpoint(folder: str, task: Task, **extra: Any) -> "PreTrainedModel":
    """A model saved by a trial or an export (config and safetensors in `folder`; labels in its config)."""
    return auto_model_class(task).from_pretrained(folder, **extra)


def apply_lora(model: "PreTrainedModel", task: Task, r: int, alpha: int, dropout: float) -> "PreTrainedModel":
    """Wrap `model` with LoRA adapters on all linear layers (the classification head stays fully trainable)."""
    from peft import LoraConfig, TaskType, get_peft_model

    task_type = TaskType.SEQ_CLS if task == Task.classification else TaskType.CAUSAL_LM
    config = LoraConfig(task_type=task_type, r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules="all-linear")
    return get_peft_model(model, config)


def model_vocab_size(candidate: ModelCandidate, trust_remote_code: bool = False) -> int | None:
    """Rows of the candidate's embedding matrix, from its config (config_overrides applied); None if unknown."""
    from transformers import AutoConfig

    source, kwargs = model_source(candidate, trust_remote_code)
    config = AutoConfig.from_pretrained(source, **kwargs)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = candidate.config_overrides.get("vocab_size", getattr(text_config, "vocab_size", None))
    return vocab if isinstance(vocab, int) else None
