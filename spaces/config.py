"""The sweep file's schema: one typed model per concern, every default here (the `search:` section's in
search_config.py) and nowhere else."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from finesweep.spaces.search_config import BaselineRecipe, SearchConfig
from finesweep.spaces.sections import Method, Precision, Quantization, Section, Task

NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
# data.chat_template values that name no file: any other value is a Jinja template file
CHAT_TEMPLATE_SETTINGS = ("auto", "model", "none")


class SplitSizes(Section):
    """How many rows each split gets: fractions of the cleaned rows (< 1) or row counts (>= 1)."""

    train: float = Field(0.8, gt=0, description="Training split: a fraction (0-1) or a row count.")
    validation: float = Field(0.1, gt=0, description="Validation split, evaluated during trials.")
    test: float = Field(0.1, gt=0, description="Test split, measured only at export.")

    @model_validator(mode="after")
    def _fractions_or_counts(self) -> "SplitSizes":
        sizes = (self.train, self.validation, self.test)
        fractions = [s < 1 for s in sizes]
        if any(fractions) and not all(fractions):
            raise ValueError(
                f"splits must be all fractions (< 1) or all row counts (>= 1), but got {sizes}; "
                "write e.g. {train: 0.8, validation: 0.1, test: 0.1} or {train: 6000, validation: 500, test: 2000}"
            )
        if all(fractions) and sum(sizes) > 1 + 1e-9:
            raise ValueError(
                f"split fractions must sum to at most 1, but train + validation + test = {sum(sizes):g}; "
                "lower one of them"
            )
        if not any(fractions) and any(s != int(s) for s in sizes):
            raise ValueError(f"row counts must be whole numbers, but got {sizes}")
        return self


class DataConfig(Section):
    """Where the data is and how to read it."""

    path: str = Field(description="CSV, TSV, JSONL, Parquet file or datasets save_to_disk folder; relative to the sweep file, or pkg://package/inside/path.")
    validation_path: str | None = Field(None, description="Pre-split input: the validation file (path is then the train file).")
    test_path: str | None = Field(None, description="Pre-split input: the test file; set together with validation_path.")
    format: Literal["auto", "csv", "tsv", "jsonl", "parquet", "datasets"] = Field("auto", description="File format; auto = by extension (a folder = a datasets save_to_disk folder).")
    encoding: str = Field("utf-8", description="Text encoding of CSV/TSV/JSONL files (utf-8 also accepts a BOM).")
    task: Task = Field(Task.classification, description="classification (text -> label) or causal_lm (prompt + response).")
    text_column: str = Field("text", description="Input text column (classification).")
    label_column: str = Field("label", description="Label column (classification); string labels are mapped to ids.")
    prompt_column: str = Field("prompt", description="Prompt column (causal_lm); no loss on its tokens.")
    response_column: str = Field("response", description="Response column (causal_lm); the loss is on these tokens.")
    system_column: str | None = Field(None, description="Optional system-prompt column beside prompt/response, Alpaca's or ShareGPT's columns (causal_lm).")
    chat_format: Literal["auto", "messages", "sharegpt", "alpaca", "prompt_response"] = Field("auto", description="How causal_lm rows hold conversations; auto = from the first row's columns, the first of: messages_column (messages), conversations_column (sharegpt), instruction_column and output_column (alpaca), prompt_column and response_column (prompt_response). The data report names the one read.")
    messages_column: str = Field("messages", description="Column of conversations (causal_lm chat_format messages): a list of {role, content} (system, user, assistant), OpenAI's chat format; the loss is on the assistant turns.")
    conversations_column: str = Field("conversations", description="Column of ShareGPT conversations (causal_lm chat_format sharegpt): a list of {from, value}; from human/user = user, gpt/assistant/model/bot/chatgpt = assistant, system = system, function_call = assistant, observation/tool = user (LLaMA-Factory's tool turns); other roles need data.roles.")
    roles: dict[str, Literal["user", "assistant", "system"]] = Field(default_factory=dict, description="Extra conversation roles and what they are, on top of the built-in ShareGPT ones (and of OpenAI's in a messages column), e.g. {function: assistant, prompter: user}; names compare case-insensitively.")
    instruction_column: str = Field("instruction", description="Alpaca's instruction column (causal_lm chat_format alpaca); with a non-empty input the user turn is instruction, a blank line, input (\"{instruction}\\n\\n{input}\", as Alpaca's template joins them).")
    input_column: str = Field("input", description="Alpaca's optional input column, joined to the instruction (never dropped when non-empty); a file without it has instructions alone.")
    output_column: str = Field("output", description="Alpaca's output column: the assistant's reply, which carries the loss.")
    chat_template: str = Field("auto", description="How causal_lm conversations become text: auto = the model's own chat template when its tokenizer has one, else plain; model = its own (an error if none); none = plain (prompt, newline, response, end-of-sequence token); or a Jinja template file.")
    splits: SplitSizes = Field(default_factory=SplitSizes, description="Train/validation/test sizes.")
    max_seq_len: int | None = Field(None, ge=8, description="Token limit; unset = cover the 99th percentile of lengths.")
    drop_duplicates: bool = Field(True, description="Drop rows whose text (causal_lm: the whole conversation) repeats an earlier row.")
    normalize: bool = Field(True, description="Compare texts after Unicode NFKC, case folding and whitespace collapsing (duplicates, conflicts, leaks).")
    drop_conflicts: bool = Field(True, description="Drop every row of a text that appears with different labels (classification).")
    allowed_labels: list[str] | None = Field(None, min_length=2, description="Labels to keep; rows with any other label are dropped. Unset = keep all.")
    drop_rare_classes: bool = Field(True, description="Drop classes with fewer rows than splits (each split needs one of every class).")
    drop_leaked: bool = Field(True, description="Remove from train every row whose text also appears in validation or test.")
    group_by_length: bool = Field(True, description="Train on batches of rows of similar token length (transformers' train_sampling_strategy group_by_length: shuffled groups of up to 50 batches, sorted by length inside each group; evaluation too): less padding, 1.4x the samples/s on the example at the same accuracy; false = random batches, each padded to its longest row.")
    too_long: Literal["truncate", "drop"] = Field("truncate", description="Rows longer than max_seq_len tokens (per candidate tokenizer): truncate or drop.")
    seed: int | None = Field(None, description="Seed of the split; unset = the sweep's seed.")

    @model_validator(mode="after")
    def _pre_split(self) -> "DataConfig":
        if (self.validation_path is None) != (self.test_path is None):
            raise ValueError(
                f"pre-split input needs both validation_path and test_path, but got validation_path={self.validation_path!r}, "
                f"test_path={self.test_path!r}; set both (path is the train file), or neither to let finesweep split path"
            )
        # Compared with the default, not model_fields_set: a dumped config (resume, each trial) sets every field.
        if self.validation_path is not None and self.splits != SplitSizes():
            raise ValueError("splits cannot be set with pre-split input (validation_path, test_path): the files are the splits; remove splits")
        return self


class ModelCandidate(Section):
    """One candidate model: a local folder, a hub id (online users), or a GGUF file."""

    name: str = Field(description="Short name used in the space, in MLflow and in the export.", pattern=NAME_PATTERN)
    path: str | None = Field(None, description="Local model folder; relative to the sweep file, or pkg://package/inside/path.")
    hub_id: str | None = Field(None, description="Hugging Face hub id, for machines that can download.")
    gguf_file: str | None = Field(None, description="GGUF file name inside `path` (or in the hub repo `hub_id`): dequantized once per machine into ~/.cache/finesweep/gguf ($FINESWEEP_CACHE), which every load of every sweep then reads.")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) for hub_id.")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description="Config fields to change at load, e.g. num_hidden_layers: 3.")
    pooling: Literal["cls", "mean"] = Field("cls", description="What a classifier's head reads: cls (the first token, transformers' own head) or mean (the mean of the token states; BERT-family encoders). mean suits sentence-transformers checkpoints, trained to embed by mean pooling (on all-MiniLM it reaches [CLS]'s accuracy with half to two thirds of the samples); its export carries its modeling file, which plain transformers loads with trust_remote_code=True.")
    gguf_origin: str | None = Field(None, description="Set by finesweep, not in a sweep file: the GGUF file that `path` (its dequantized copy in the machine's cache) was made from; the model card names it.")

    @model_validator(mode="after")
    def _one_source(self) -> "ModelCandidate":
        if (self.path is None) == (self.hub_id is None):
            raise ValueError(
                f"model '{self.name}' needs exactly one of `path` (a local folder) or `hub_id`, "
                f"but got path={self.path!r}, hub_id={self.hub_id!r}"
            )
        # A dequantized candidate loads its folder; a gguf_file beside it would send loads back to the GGUF.
        if self.gguf_origin is not None and (self.gguf_file is not None or self.path is None):
            raise ValueError(
                f"model '{self.name}': gguf_origin marks a folder finesweep dequantized from a GGUF file, so it needs "
                f"`path` and no `gguf_file`, but got path={self.path!r}, gguf_file={self.gguf_file!r}; "
                "remove gguf_origin (give path and gguf_file, and finesweep dequantizes the file itself)"
            )
        return self


class FloatRange(Section):
    """A continuous dimension sampled between low and high."""

    low: float = Field(description="Smallest value.")
    high: float = Field(description="Largest value.")
    log: bool = Field(False, description="Sample on a log scale.")

    @model_validator(mode="after")
    def _ordered(self) -> "FloatRange":
        if self.low > self.high:
            raise ValueError(f"`low <= high` must hold, but got (low={self.low:g}, high={self.high:g}); swap them")
        if self.log and self.low <= 0:
            raise ValueError(f"a log-scale range needs low > 0, but got low={self.low:g}")
        return self


# space.learning_rate where the sweep file leaves it out, by method; a space of full fine-tuning and adapters searches
# each method in its own range (a full fine-tune diverges at LoRA's rates, LoRA barely moves at a full fine-tune's).
# Full fine-tuning: centred on the Trainer's 5e-5, spanning BERT's grid {2e-5, 3e-5, 5e-5} (Devlin et al. 2019,
# appendix A.3) with room above it for small distilled encoders (the tweets example's MiniLM wins at 1e-4).
# LoRA and QLoRA: centred on 2e-4, QLoRA's rate for 7B-13B models and peft's examples' (Dettmers et al. 2023,
# appendix B), spanning LoRA's 4e-4 and 5e-4 for RoBERTa-base (Hu et al. 2021, appendix D) and QLoRA's 1e-4 for
# its largest models.
DEFAULT_LEARNING_RATES = {"full": (1e-5, 2e-4), "lora": (5e-5, 1e-3), "qlora": (5e-5, 1e-3)}


# Effective batches searched where the space is silent, by task. A classifier: BERT's fine-tuning recipe (16, 32).
# A causal LM: 8 is what TRL's SFTTrainer (the Trainer's per_device_train_batch_size), LLaMA-Factory's LoRA SFT
# examples (1 x 8 accumulation) and Axolotl's (2 x 4) train with, and 16 one step up; larger costs a 2-core CPU
# 18-36 s a step on the 135M-parameter example, so a short sweep would train a handful of steps.
CLASSIFIER_EFFECTIVE_BATCHES = (16, 32)
CAUSAL_LM_EFFECTIVE_BATCHES = (8, 16)


def method_default_learning_rate(method: Method | str) -> FloatRange:
    """One method's DEFAULT_LEARNING_RATES as a log-uniform range."""
    low, high = DEFAULT_LEARNING_RATES[Method(method).value]
    return FloatRange(low=low, high=high, log=True)


def default_learning_rate(methods: list[str]) -> "FloatRange | MethodLearningRates":
    """space.learning_rate for a space that leaves it out: the methods' default range where they share one (full
    fine-tuning's when none is named), else each method's own."""
    named = [Method(m) for m in methods if m in DEFAULT_LEARNING_RATES] or [Method.full]
    ranges = {m.value: method_default_learning_rate(m) for m in named}
    if len(set(ranges.values())) == 1:
        return next(iter(ranges.values()))
    return MethodLearningRates.model_validate(ranges)


def _default_lr() -> FloatRange:
    return method_default_learning_rate(Method.full)


FloatDim = Annotated[float | FloatRange, Field(union_mode="left_to_right")]


class MethodLearningRates(Section):
    """A learning rate per method (each a value or a range, on one scale: Optuna searches one parameter); a method of
    the space left out searches its default range."""

    full: FloatDim | None = Field(None, description="Full fine-tuning's learning rate.")
    lora: FloatDim | None = Field(None, description="LoRA's learning rate.")
    qlora: FloatDim | None = Field(None, description="QLoRA's learning rate.")

    def given(self) -> dict[str, float | FloatRange]:
        """The methods the mapping names, with their value or range."""
        return {name: dim for name in type(self).model_fields if (dim := getattr(self, name)) is not None}

    def of(self, method: Method | str) -> float | FloatRange:
        """`method`'s learning rate: the one given, else its default range."""
        dim = getattr(self, Method(method).value)
        return method_default_learning_rate(method) if dim is None else dim


def _learning_rate_shape(value: Any) -> str:
    """Which form of space.learning_rate `value` is: a mapping keyed by method names is one per method; any other
    mapping is a range (so its errors speak of low and high); anything else a value."""
    if isinstance(value, (FloatRange, MethodLearningRates)):
        return type(value).__name__
    if isinstance(value, dict):
        by_method = value and set(value) <= {m.value for m in Method}
        return MethodLearningRates.__name__ if by_method else FloatRange.__name__
    return "float"


LearningRateDim = Annotated[
    Annotated[float, Tag("float")] | Annotated[FloatRange, Tag(FloatRange.__name__)]
    | Annotated[MethodLearningRates, Tag(MethodLearningRates.__name__)],
    Discriminator(_learning_rate_shape)]
# The space's continuous dimensions: each a fixed value or a searched range (dropout may also be the checkpoint's own,
# None, or auto until the plan resolves it: search/probe/dropout_default.py).
FLOAT_DIMENSIONS = ("learning_rate", "warmup_ratio", "weight_decay", "dropout")
CHECKPOINT_DROPOUT, AUTO_DROPOUT = "checkpoint", "auto"  # the words for the checkpoint's own and the plan's pick


def _is_number(text: str) -> bool:
    """Whether `text` reads as a number (pydantic then takes "0.05" as 0.05, as it would without this field's words)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class SpaceConfig(Section):
    """The search space. A list is a categorical choice; {low, high} a range; a plain value is fixed."""

    learning_rate: LearningRateDim = Field(default_factory=_default_lr, description="Peak learning rate: a value, a range, or one of them per method ({full: {low: 1.0e-5, high: 2.0e-4, log: true}, lora: ...}; a method of the space left out takes its default range; the ranges on one scale). Unset = a log-uniform range by method (full: 1e-5..2e-4, around the Trainer's 5e-5 and BERT's 2e-5..5e-5; lora, qlora: 5e-5..1e-3, around QLoRA's and peft's 2e-4; sources in spaces/config.py); a space of full fine-tuning and adapters searches each method in its own.")
    effective_batch_size: list[Annotated[int, Field(ge=1)]] = Field(list(CLASSIFIER_EFFECTIVE_BATCHES), min_length=1, description="Samples per optimizer step; the probe picks the micro-batch. Unset: [16, 32] for a classifier (BERT's fine-tuning batch sizes), [8, 16] for a causal LM (8: what TRL's SFTTrainer, LLaMA-Factory's and Axolotl's LoRA examples train with; sources in spaces/config.py).")
    precision: list[Precision] = Field([Precision.fp32, Precision.bf16], min_length=1, description="Training precisions to try.")
    model: list[str] | None = Field(None, description="Candidate names to try; unset = every entry of `models`.")
    method: list[Method] = Field([Method.full], min_length=1, description="full fine-tuning, lora, and/or qlora (LoRA on the base loaded in 4-bit NF4 with double quantization, computing in the trial's precision; bitsandbytes).")
    lora_r: list[Annotated[int, Field(ge=1)]] = Field([8, 16], min_length=1, description="LoRA rank (only sampled for lora and qlora).")
    lora_alpha: list[Annotated[int, Field(ge=1)]] = Field([16, 32], min_length=1, description="LoRA alpha (only sampled for lora and qlora).")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    warmup_ratio: FloatDim = Field(0.06, description="Fraction of max_steps spent warming up.")
    weight_decay: FloatDim = Field(0.01, description="AdamW weight decay.")
    freeze_embeddings: bool = Field(True, description="A classifier's full fine-tuning leaves the word embeddings as the checkpoint has them (no gradient, no optimizer state: all-MiniLM-L6-v2's are 11.7M of its 22.7M weights): 1.13x to 1.29x faster steps on a 2-core CPU, 10% less memory, the same test accuracy in five paired runs (benchmarks/README.md). A causal LM trains them (a chat template's new tokens must learn), and so does the baseline (transformers' defaults train them); LoRA keeps its whole base frozen anyway. false: they train.")
    dropout: FloatDim | Literal["auto"] | None = Field("auto", description="Every dropout rate of the model (hidden, attention, classifier head: its config's fields, whatever the architecture names them): a value, a searched range, `checkpoint` (the checkpoint's own: 0.1 for BERT-family encoders) or auto: 0 where one model trains at most 2 passes over the training split (the budget's passes, but no more than a trial makes or search.exploit.max_epochs lets the winner train), the checkpoint's own beyond (a short fine-tune under-fits, and dropout slows both its steps and its learning: measured on two tweet slices with all-MiniLM-L6-v2, 0.45 and 0.8 points more after one epoch, 1.15x faster steps; benchmarks/README.md). The baseline keeps the checkpoint's.")

    @model_validator(mode="before")
    @classmethod
    def _learning_rate_by_method(cls, data: Any) -> Any:
        """A space without learning_rate searches its methods' default range (a bad method is the field's error)."""
        if not isinstance(data, dict) or "learning_rate" in data:
            return data
        methods = data.get("method", [Method.full])
        names = [getattr(m, "value", m) for m in methods] if isinstance(methods, list) else []
        return {**data, "learning_rate": default_learning_rate(names)}

    @model_validator(mode="after")
    def _learning_rates_of_the_spaces_methods(self) -> "SpaceConfig":
        if not isinstance(self.learning_rate, MethodLearningRates):
            return self
        searched = [m.value for m in self.method]
        strangers = [name for name in self.learning_rate.given() if name not in searched]
        if strangers:
            raise ValueError(f"learning_rate gives a rate for {', '.join(strangers)}, which space.method {searched} "
                             "does not search; add it to space.method or remove it from space.learning_rate")
        scales = {m: dim.log for m in searched if isinstance(dim := self.learning_rate.of(m), FloatRange)}
        if len(set(scales.values())) > 1:
            listed = ", ".join(f"{m} {'log' if log else 'linear'}" for m, log in scales.items())
            raise ValueError(f"learning_rate's ranges per method must share one scale (the search samples one "
                             f"parameter), but found {listed} (a method left out searches its default, a log range); "
                             "give every range the same `log`")
        return self

    @property
    def learning_rate_by_method(self) -> bool:
        """Whether the learning rate's value or range depends on the trial's method."""
        return isinstance(self.learning_rate, MethodLearningRates)

    def float_dimension(self, name: str, method: Method | str | None = None) -> Any:
        """A continuous dimension's value or range for `method`'s trials; without a method, a learning rate that
        depends on it is the range that spans every method's (what a table or a plot of all trials covers)."""
        if name != "learning_rate" or not isinstance(self.learning_rate, MethodLearningRates):
            return getattr(self, name)
        if method is not None:
            return self.learning_rate.of(method)
        dims = [self.learning_rate.of(m) for m in self.method]
        ends = [end for dim in dims for end in ((dim.low, dim.high) if isinstance(dim, FloatRange) else (dim, dim))]
        if min(ends) == max(ends):
            return ends[0]
        return FloatRange(low=min(ends), high=max(ends), log=all(d.log for d in dims if isinstance(d, FloatRange)))

    def freezes_embeddings(self, task: Task | str, method: Method | str) -> bool:
        """Whether `freeze_embeddings` applies: a classifier's full fine-tuning (a causal LM's new chat tokens must
        learn; LoRA's base is frozen anyway). The baseline's recipe never freezes them (search/tuning/context.py)."""
        return self.freeze_embeddings and Task(task) == Task.classification and Method(method) == Method.full

    def point_problem(self, point: dict[str, Any], models: list[str]) -> str | None:
        """Why `point` is not a point of this space (None when it is)."""
        choices: dict[str, list[Any]] = {
            "model": models, "precision": [p.value for p in self.precision], "method": [m.value for m in self.method],
            "effective_batch_size": self.effective_batch_size, "lora_r": self.lora_r, "lora_alpha": self.lora_alpha,
        }
        method = point.get("method") if point.get("method") in choices["method"] else None
        for key, value in point.items():
            if key in choices and value not in choices[key]:
                return f"{key}={value!r} is not among the space's choices {choices[key]}"
            dim = self.float_dimension(key, method) if key in FLOAT_DIMENSIONS else None
            if key not in choices and key not in FLOAT_DIMENSIONS:
                return f"unknown dimension `{key}`; the dimensions are {sorted([*choices, *FLOAT_DIMENSIONS])}"
            if key in FLOAT_DIMENSIONS and (dim is None or isinstance(dim, str)):
                own = AUTO_DROPOUT if dim else CHECKPOINT_DROPOUT
                return f"{key} is not searched (space.{key} is {own}); set space.{key} to a range to search it"
            if isinstance(dim, FloatRange) and not dim.low <= float(value) <= dim.high:
                whose = f" for {method}" if key == "learning_rate" and self.learning_rate_by_method and method else ""
                return f"{key}={value} lies outside the space's range{whose} [{dim.low:g}, {dim.high:g}]"
            if dim is not None and not isinstance(dim, FloatRange):
                return f"{key} is fixed at {dim:g} in the space, so it cannot be set per point"
        return None

    @field_validator("dropout", mode="before")
    @classmethod
    def _checkpoint_dropout(cls, value: Any) -> Any:
        """`checkpoint` is the word for the checkpoint's own rates (None inside: no override); any other word than
        auto is refused with every form the field takes (the union's own error names only one)."""
        if isinstance(value, str) and value not in (CHECKPOINT_DROPOUT, AUTO_DROPOUT) and not _is_number(value):
            raise ValueError(f"must be a rate in [0, 1), a range {{low, high}}, `{CHECKPOINT_DROPOUT}` (the checkpoint's "
                             f"own rates) or `{AUTO_DROPOUT}`, but found {value!r}")
        return None if value == CHECKPOINT_DROPOUT else value

    @field_validator("warmup_ratio", "dropout")
    @classmethod
    def _in_unit(cls, value: float | FloatRange | str | None, info) -> float | FloatRange | str | None:
        if value is None or isinstance(value, str):
            return value
        low, high = (value, value) if isinstance(value, float) else (value.low, value.high)
        if low < 0 or high >= 1:
            raise ValueError(f"{info.field_name} must lie in [0, 1), but got {low:g}..{high:g}")
        return value


class ResourcesConfig(Section):
    """What each trial and the probe may use."""

    cpus_per_trial: float = Field(2, gt=0, description="CPU cores reserved for one trial.")
    gpus_per_trial: float | None = Field(None, ge=0, description="GPUs for one trial (fractions share a GPU; Ray accounts for them). Unset: none without CUDA; with CUDA, a share of one GPU sized by the probe's peak memory (as many trials per GPU as fit with the probe's margin), or whole GPUs round-robin when each trial needs one. 0 trains on the CPU even where CUDA is present.")
    workers_per_trial: int = Field(1, ge=1, description="Data-parallel world size of each trial: above 1, that many Ray Train workers (torch.distributed), each with cpus_per_trial and gpus_per_trial (0 or 1); effective batch = micro x accumulation x workers.")
    deepspeed_stage: Literal[0, 2, 3] = Field(0, description="DeepSpeed ZeRO stage of every trial (2: optimizer state and gradients partitioned over the ranks, 3: parameters too); 0 = off. Needs CUDA and the deepspeed package.")
    memory_budget: str = Field("6GiB", pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B|B)?\s*$", description="CPU: memory the concurrently running trials may use together (e.g. 6GiB); each trial's probe gets an equal share.")
    max_micro_batch: int | None = Field(None, ge=1, description="Largest micro-batch the probe tries; unset = the largest effective batch.")
    micro_batch: Literal["fastest", "largest"] = Field("fastest", description="Micro-batch trials use: the probe's fastest (samples/s) fitting one, or the largest that fits.")
    gradient_checkpointing: Literal["auto", "on", "off"] = Field("auto", description="Recompute activations in the backward pass to fit a larger micro-batch. auto: where the largest effective batch needs gradient accumulation, the probe also measures with checkpointing and each trial trains with the plan whose measured samples/s is higher; on or off: always or never.")

    @field_validator("gradient_checkpointing", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `on`/`off` as true/false: take them as the words the user wrote.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _one_gpu_per_rank(self) -> "ResourcesConfig":
        # A rank trains on one device: NCCL refuses two ranks on one GPU (their process group fails to start), and a
        # second GPU of a rank would sit idle.
        if self.workers_per_trial > 1 and self.gpus_per_trial not in (None, 0, 1):
            raise ValueError(
                f"gpus_per_trial must be 0 or 1 when workers_per_trial > 1 (each data-parallel rank trains on one "
                f"device of its own), but got gpus_per_trial={self.gpus_per_trial:g} with workers_per_trial="
                f"{self.workers_per_trial}; set gpus_per_trial: 1 and workers_per_trial to the GPUs a trial should "
                "use, or workers_per_trial: 1 to share a GPU between trials"
            )
        return self


class TrackingConfig(Section):
    """Where MLflow records the sweep."""

    uri: str | None = Field(None, description="MLflow tracking URI; unset = a SQLite store in the sweep folder.")
    experiment: str | None = Field(None, description="MLflow experiment name; unset = the sweep's name.")


# The export list of a sweep file that leaves it unset: bitsandbytes (memory) and the fast CPU variant (speed).
DEFAULT_QUANTIZATION = [Quantization.int8, Quantization.onnx_int8]


class ExportConfig(Section):
    """What is done with the best checkpoint."""

    quantization: list[Quantization] = Field(DEFAULT_QUANTIZATION, min_length=1, description="Quantized exports to make and measure: none, int8 and nf4 (bitsandbytes), torchao-int8 (int8 weight-only, a CPU path), torchao-int4 (int4 weight-only; a CUDA GPU of compute capability 8.0+) and torchao-fp8 (float8 weights and activations; CUDA 8.9+: Ada, Hopper), the three with the torchao extra; onnx-int8 (ONNX Runtime int8, the fast CPU path: dynamic int8 for a classifier, int8 weight blocks and the key/value cache for a causal LM); gguf-q8_0 and gguf-q4_k_m (a causal LM as one GGUF file for llama.cpp, Ollama and LM Studio, made by llama.cpp's converter and quantizer and measured in llama.cpp; the gguf extra: `bash scripts/setup.sh --gguf`). Unset: int8 and onnx-int8. Under search.time_limit, where the export would take over a third of what the limit leaves, that list (unset or written as it is) loses int8 on a machine without CUDA, and then onnx-int8 too if that is not enough (the plan says so); another list is kept.")
    output_dir: str | None = Field(None, description="Export folder; unset = <sweep folder>/export.")
    max_metric_drop: float = Field(0.01, ge=0, description="Warn when a quantized model's metric falls by more than this.")
    generation_samples: int = Field(32, ge=0, description="causal_lm: greedy answers to the first this many test prompts, from the full model and each quantized one, scored against the references (exact match, token F1, ROUGE-L) and shown side by side in the model card; 0 = off. Under search.time_limit, fewer (none below 4) where the export would take over a third of what the limit leaves (the plan says so).")
    register_model: bool = Field(True, description="Register each exported variant in the MLflow model registry (a new version each export, alias = variant).")
    registered_model_name: str | None = Field(None, description="Registered model name; unset = the sweep's name.", min_length=1)


class SweepConfig(Section):
    """A whole sweep file."""

    name: str = Field(description="Sweep name: the folder under output_root and the MLflow experiment.", pattern=NAME_PATTERN)
    seed: int = Field(42, description="Seed of splits, sampler and training.")
    output_root: str = Field("runs", description="Folder holding each sweep's folder (relative to the working directory).")
    trust_remote_code: bool = Field(False, description="Allow model code from the model folder or hub to run.")
    data: DataConfig
    models: list[ModelCandidate] = Field(min_length=1, description="Candidate models.")
    space: SpaceConfig = Field(default_factory=SpaceConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

    @model_validator(mode="before")
    @classmethod
    def _effective_batch_by_task(cls, data: Any) -> Any:
        """A causal LM's space without effective_batch_size searches CAUSAL_LM_EFFECTIVE_BATCHES (a dumped config,
        as a resume reads, names the field and keeps it)."""
        section, space = (data.get("data"), data.get("space", {})) if isinstance(data, dict) else (None, None)
        task = section.get("task") if isinstance(section, dict) else getattr(section, "task", None)
        if getattr(task, "value", task) != Task.causal_lm.value or not isinstance(space, dict) \
                or "effective_batch_size" in space:
            return data
        return {**data, "space": {**space, "effective_batch_size": list(CAUSAL_LM_EFFECTIVE_BATCHES)}}

    @model_validator(mode="after")
    def _space_names_models(self) -> "SweepConfig":
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, but got {names}")
        unknown = [n for n in (self.space.model or []) if n not in names]
        if unknown:
            raise ValueError(
                f"space.model names {unknown} that no entry of `models` has; known names are {names}"
            )
        problems = [f"search.initial_points[{i}]: {problem}" for i, point in enumerate(self.search.initial_points)
                    if (problem := self.space.point_problem(point, self.model_names))]
        problems += self._baseline_problems()
        if problems:
            raise ValueError("; ".join(problems))
        gguf = [q.value for q in self.export.quantization if q.is_gguf]
        if gguf and self.data.task != Task.causal_lm:
            raise ValueError(f"export.quantization: {', '.join(gguf)} is a GGUF file for llama.cpp, which runs causal "
                             f"language models, but data.task is {self.data.task.value}; remove {', '.join(gguf)} "
                             "(onnx-int8 is the fast CPU variant of a classifier)")
        pooled = [m.name for m in self.models if m.pooling != "cls"]
        if pooled and self.data.task != Task.classification:
            raise ValueError(f"models {pooled} set `pooling`, which chooses a classifier's head, but data.task is "
                             f"{self.data.task.value}; remove `pooling` from them")
        return self

    def _baseline_problems(self) -> list[str]:
        """The baseline trains a model and method the probe measures: the space's."""
        recipe = self.search.baseline
        if not isinstance(recipe, BaselineRecipe):
            return []
        problems = []
        if recipe.model is not None and recipe.model not in self.model_names:
            problems.append(f"search.baseline.model: {recipe.model!r} is not among the space's models "
                            f"{self.model_names}; name one of them (the probe measures only those)")
        if recipe.method is not None and recipe.method not in self.space.method:
            problems.append(f"search.baseline.method: {recipe.method.value!r} is not among space.method "
                            f"{[m.value for m in self.space.method]}; add it there or choose one of them")
        return problems

    @property
    def model_names(self) -> list[str]:
        """The candidates the space chooses from."""
        return self.space.model or [m.name for m in self.models]

    def candidate(self, name: str) -> ModelCandidate:
        """The model entry called `name`."""
        return next(m for m in self.models if m.name == name)
