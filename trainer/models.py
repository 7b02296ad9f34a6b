"""Model and tokenizer loading for every kind of candidate: a local folder, a hub id, or a GGUF file."""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finesweep.spaces import Method, ModelCandidate, Precision, SweepFileError, Task
from finesweep.spaces.files import write_json_atomic

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Heads stay in full precision in every quantized variant: they are tiny and their rounding moves every prediction.
HEAD_MODULES = ["classifier", "score"]
# The transformers auto class a model of each task loads with (by name: the model card writes it in its code).
AUTO_CLASS_NAMES = {Task.classification: "AutoModelForSequenceClassification", Task.causal_lm: "AutoModelForCausalLM"}
# The transformers pipeline task of a model of each task (MLflow's flavor and the model card's metadata name it).
PIPELINE_TASKS = {Task.classification: "text-classification", Task.causal_lm: "text-generation"}
# An exported classifier of text pairs records its two input columns under this config.json key (data.text_column,
# data.text_pair_column): `predict` and the ONNX export read it to feed the model pairs.
TEXT_PAIR_KEY = "finesweep_text_pair"


def auto_model_class(task: Task | str) -> Any:
    """The transformers auto class a model of `task` loads with (finesweep's own heads registered with it)."""
    import transformers

    register_own_heads()
    return getattr(transformers, AUTO_CLASS_NAMES[Task(task)])


# Model types whose encoder the mean-pooled head (trainer/mean_pooling.py) is written for.
MEAN_POOLING_MODEL_TYPES = ("bert",)


@functools.cache
def register_own_heads() -> None:
    """Make the auto classes load folders of finesweep's mean-pooled classifier with the installed class (no remote
    code runs), and make its saves carry the modeling file and `auto_map` plain transformers needs."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from finesweep.trainer.mean_pooling import MeanPooledBertConfig, MeanPooledBertForSequenceClassification

    AutoConfig.register(MeanPooledBertConfig.model_type, MeanPooledBertConfig, exist_ok=True)
    AutoModelForSequenceClassification.register(MeanPooledBertConfig, MeanPooledBertForSequenceClassification,
                                                exist_ok=True)
    MeanPooledBertConfig.register_for_auto_class()
    MeanPooledBertForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")


def auto_config(folder: str | Path) -> Any:
    """The configuration of a saved folder, finesweep's own model types among those transformers knows."""
    from transformers import AutoConfig

    register_own_heads()
    return AutoConfig.from_pretrained(folder)


def text_pair_columns(model_config: Any) -> list[str] | None:
    """The two input columns of a classifier of text pairs (TEXT_PAIR_KEY), None for one text a row."""
    return getattr(model_config, TEXT_PAIR_KEY, None)


def copy_config_without_code(full_dir: Path, out_dir: Path) -> None:
    """The full model's config.json for a folder that runs without transformers' model classes (ONNX Runtime): the
    labels and the architecture's name, but as its plain encoder type and without `auto_map`, so a user reading it
    with AutoConfig needs no code from the folder."""
    import json

    from finesweep.trainer.mean_pooling import MeanPooledBertConfig

    config = json.loads((Path(full_dir) / "config.json").read_text())
    config.pop("auto_map", None)
    if config.get("model_type") == MeanPooledBertConfig.model_type:
        config["model_type"] = MEAN_POOLING_MODEL_TYPES[0]
    write_json_atomic(Path(out_dir) / "config.json", config)


def check_pooling(candidate: ModelCandidate, trust_remote_code: bool = False) -> None:
    """A candidate with `pooling: mean` must be an encoder the mean-pooled head is written for."""
    if candidate.pooling == "cls":
        return
    from transformers import AutoConfig

    source, kwargs = model_source(candidate, trust_remote_code)
    try:
        model_type = AutoConfig.from_pretrained(source, **kwargs).model_type
    except (OSError, ValueError) as error:
        raise SweepFileError(
            f"models[{candidate.name}].pooling: mean needs the model's configuration to know its type, but {source} "
            f"gave none ({str(error).splitlines()[0]}); point `path` at a folder with the model's config.json, or "
            "use pooling: cls") from None
    if model_type not in MEAN_POOLING_MODEL_TYPES:
        raise SweepFileError(
            f"models[{candidate.name}].pooling: mean is written for BERT-family encoders (model type "
            f"{', '.join(MEAN_POOLING_MODEL_TYPES)}), but {source} is a '{model_type}' model; use pooling: cls "
            "(transformers' own head for it)")


def with_pad_token(tokenizer: "PreTrainedTokenizerBase", name: str = "") -> "PreTrainedTokenizerBase":
    """A tokenizer without a pad token pads with its end-of-sequence token (set on the tokenizer, so a tokenizer saved
    with a model pads the way the trials did)."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        log.info("%s: tokenizer has no pad token; padding with its end-of-sequence token", name or "model")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def pad_like(model: "PreTrainedModel", tokenizer: "PreTrainedTokenizerBase") -> "PreTrainedModel":
    """The model pads as its tokenizer does: a decoder's classification head finds each row's last token by the pad id
    in its config, and refuses a batch of more than one row without it (the tokenizer's eos, where it has no pad)."""
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model


def model_source(candidate: ModelCandidate, trust_remote_code: bool) -> tuple[str, dict[str, Any]]:
    """What from_pretrained is given: the folder or hub id, and the keyword arguments every load shares."""
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if candidate.gguf_file:
        kwargs["gguf_file"] = candidate.gguf_file
    if candidate.revision:
        kwargs["revision"] = candidate.revision
    return candidate.path or candidate.hub_id, kwargs  # type: ignore[return-value]


def copy_tokenizer(source: str | Path, out_dir: str | Path) -> None:
    """Save the tokenizer next to the weights, so the folder loads on its own."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(source).save_pretrained(out_dir)


def load_tokenizer(candidate: ModelCandidate, trust_remote_code: bool = False,
                   text_pairs: bool = False) -> "PreTrainedTokenizerBase":
    """The candidate's own tokenizer; a tokenizer without a pad token pads with its end-of-sequence token.
    `text_pairs` (data.text_pair_column): one that puts nothing between a pair's texts is given a separator."""
    from transformers import AutoTokenizer

    source, kwargs = model_source(candidate, trust_remote_code)
    tokenizer = with_pad_token(AutoTokenizer.from_pretrained(source, **kwargs), candidate.name)
    return separate_pairs(tokenizer, candidate.name) if text_pairs else tokenizer


def separate_pairs(tokenizer: "PreTrainedTokenizerBase", name: str = "") -> "PreTrainedTokenizerBase":
    """A decoder's tokenizer (GPT-2's, Llama 3's, SmolLM2's) joins a text pair with nothing between, so the model
    could not tell where the second text starts: its pair template gets its separator token, else its end of
    sequence, between the two (tokenizers' TemplateProcessing, after its own post-processing). The template is part
    of tokenizer.json, so every checkpoint, export, `predict` and the model card's code feed pairs the same way.
    An encoder's tokenizer that marks pairs already ([SEP], </s>) is left as it is."""
    if tokenizer.num_special_tokens_to_add(pair=True) > tokenizer.num_special_tokens_to_add(pair=False):
        return tokenizer
    separator = tokenizer.sep_token or tokenizer.eos_token
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if separator is None or backend is None:
        return tokenizer  # no token to separate with, or no template to change: tokenizing refuses the pairs
    from tokenizers import processors

    pair = processors.TemplateProcessing(single="$A", pair=f"$A {separator} $B:1",
                                         special_tokens=[(separator, tokenizer.convert_tokens_to_ids(separator))])
    own = backend.post_processor
    backend.post_processor = pair if own is None else processors.Sequence([own, pair])
    log.info("%s: the tokenizer joins a text pair with nothing between; %s now separates the two texts",
             name or "model", separator)
    return tokenizer


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
    if task == Task.classification and candidate.pooling == "mean":
        return _mean_pooled(source, kwargs)
    return auto_model_class(task).from_pretrained(source, **kwargs)


def _mean_pooled(source: str, kwargs: dict[str, Any]) -> "PreTrainedModel":
    """The candidate's BERT encoder under the mean-pooled head. Its configuration is made here (the candidate's own,
    with the sweep's changes) so transformers does not warn that a 'bert' config builds another model type."""
    from transformers import AutoConfig

    from finesweep.trainer.mean_pooling import MeanPooledBertConfig, MeanPooledBertForSequenceClassification

    register_own_heads()
    source_keys = {"trust_remote_code", "revision"}  # where both the configuration and the weights come from
    load = {k: v for k, v in kwargs.items() if k in source_keys | {"quantization_config", "device_map", "dtype"}}
    changes = {k: v for k, v in kwargs.items() if k not in load and k != "gguf_file"}  # overrides and labels
    base = AutoConfig.from_pretrained(source, **{k: load[k] for k in source_keys & load.keys()}, **changes)
    settings = {k: v for k, v in base.to_dict().items() if k != "model_type"}
    return MeanPooledBertForSequenceClassification.from_pretrained(source, config=MeanPooledBertConfig(**settings),
                                                                   **load)


def load_checkpoint(folder: str, task: Task, **extra: Any) -> "PreTrainedModel":
    """A model saved by a trial or an export in transformers' format (config and safetensors in `folder`; labels in
    its config). An exported folder of any runtime loads through trainer/serving/loader.py."""
    return auto_model_class(task).from_pretrained(folder, **extra)


@dataclass(frozen=True)
class TrainingSetup:
    """How a trial (or a probe step) trains the candidate: the method, its LoRA dimensions, the precision the 4-bit
    base of qlora computes in, and whether activations are recomputed (gradient checkpointing)."""

    method: str = Method.full.value
    precision: str = Precision.fp32.value
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    gradient_checkpointing: bool = False
    dropout: float | None = None  # every dropout rate of the model's config (space.dropout); None: the checkpoint's
    freeze_embeddings: bool = False  # the word embeddings do not train (where SpaceConfig.freezes_embeddings says)


# A model configuration's dropout rates, whatever the architecture names them: BERT's hidden_dropout_prob,
# attention_probs_dropout_prob and classifier_dropout, DistilBERT's dropout and seq_classif_dropout, GPT-2's resid_pdrop,
# embd_pdrop and attn_pdrop, Llama's attention_dropout, T5's dropout_rate. (LayerDrop's layerdrop skips whole layers.)
DROPOUT_FIELD = re.compile(r"(dropout|pdrop)(_prob|_rate)?$")


def dropout_overrides(candidate: ModelCandidate, rate: float | None, trust_remote_code: bool) -> dict[str, float]:
    """Config fields that set every dropout rate of the candidate's architecture to `rate` ({} for None: the
    checkpoint's own). classifier_dropout is often unset (None: the head takes hidden_dropout_prob); it is set too."""
    if rate is None:
        return {}
    from transformers import AutoConfig

    source, kwargs = model_source(candidate, trust_remote_code)
    config = AutoConfig.from_pretrained(source, **kwargs)
    settings = config.get_text_config().to_dict()
    return {name: rate for name, value in settings.items()
            if DROPOUT_FIELD.search(name) and (isinstance(value, float) or value is None or type(value) is int)}


# Checkpointing through torch.utils.checkpoint's non-reentrant path: it needs no input that requires grad, so it
# works the same with frozen embeddings (LoRA, qlora) as with full fine-tuning (and it is what torch recommends).
CHECKPOINTING_KWARGS = {"use_reentrant": False}


def load_trainable(candidate: ModelCandidate, task: Task, label_names: list[str] | None, setup: TrainingSetup,
                   trust_remote_code: bool = False, device: str = "cpu") -> "PreTrainedModel":
    """The candidate ready to train by `setup`, on `device`: full weights, LoRA adapters on the full model, or LoRA
    adapters on a 4-bit base (qlora, prepared for k-bit training as peft prescribes)."""
    method = Method(setup.method)
    dropout = dropout_overrides(candidate, setup.dropout, trust_remote_code)
    if method == Method.qlora:
        model = load_model(candidate, task, label_names, trust_remote_code, **dropout,
                           quantization_config=four_bit_base(setup.precision, task), device_map={"": device})
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=setup.gradient_checkpointing,
                                                gradient_checkpointing_kwargs=CHECKPOINTING_KWARGS)
    else:
        model = load_model(candidate, task, label_names, trust_remote_code, **dropout).to(device)
        if setup.gradient_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINTING_KWARGS)
        if setup.freeze_embeddings:
            freeze_input_embeddings(model)
    if method.has_adapter:
        model = apply_lora(model, task, setup.lora_r, setup.lora_alpha, setup.lora_dropout)
    return model


def freeze_input_embeddings(model: "PreTrainedModel") -> bool:
    """Stop the word embeddings training: no gradient and no optimizer state for the largest matrix of a small
    encoder, so each step does less. Not where the output layer shares their weights (a tied language-model head
    would stop learning too). Returns whether it froze them."""
    embeddings, output = model.get_input_embeddings(), model.get_output_embeddings()
    if embeddings is None or (output is not None and output.weight is embeddings.weight):
        return False
    embeddings.weight.requires_grad_(False)
    return True


# A classifier's new head trains in full (peft saves it whole beside the adapters, under these names for sequence
# classification), so it is never quantized; a causal LM's output layer stays unquantized by transformers' default.
CLASSIFIER_HEADS = ["classifier", "score"]


def four_bit_base(precision: str, task: Task) -> Any:
    """QLoRA's base: NF4 weights with double quantization (the QLoRA paper's recipe), computing in the trial's
    precision (fp32 where the trial trains in fp32)."""
    import torch
    from transformers import BitsAndBytesConfig

    compute = {Precision.bf16.value: torch.bfloat16, Precision.fp16.value: torch.float16}.get(precision, torch.float32)
    skip = CLASSIFIER_HEADS if Task(task) == Task.classification else None
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute, llm_int8_skip_modules=skip)


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
