"""The sweep file's schema: one typed model per concern, every default here (the `space:` section's in
space_config.py, the `search:` section's in search_config.py) and nowhere else."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from finesweep.spaces.search_config import TASK_DEFAULT_METRIC, BaselineRecipe, SearchConfig
from finesweep.spaces.space_config import CAUSAL_LM_EFFECTIVE_BATCHES, SpaceConfig
from finesweep.spaces.sections import Quantization, Section, Task
from finesweep.spaces.units import BYTES_PATTERN, parse_bytes

NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
# A path inside an installed package (pkg://package/inside/path): found without importing the package.
PACKAGE_SCHEME = "pkg://"
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

    path: str = Field(description=(
        "CSV, TSV, JSONL, Parquet file or datasets save_to_disk folder; relative to the sweep file, or "
        "pkg://package/inside/path."))
    validation_path: str | None = Field(None, description=(
        "Pre-split input: the validation file (path is then the train file)."))
    test_path: str | None = Field(None, description=(
        "Pre-split input: the test file; set together with validation_path."))
    format: Literal["auto", "csv", "tsv", "jsonl", "parquet", "datasets"] = Field("auto", description=(
        "File format; auto = by extension (a folder = a datasets save_to_disk folder)."))
    encoding: str = Field("utf-8", description="Text encoding of CSV/TSV/JSONL files (utf-8 also accepts a BOM).")
    task: Task = Field(Task.classification, description=(
        "classification (text -> label) or causal_lm (prompt + response)."))
    text_column: str = Field("text", description="Input text column (classification).")
    text_pair_column: str | None = Field(None, description=(
        "A second input text column, for a classifier of text pairs (entailment, paraphrase, a question and a "
        "passage): each row's two texts are one input, tokenized as the model's pair; an empty second text drops the "
        "row; duplicates, conflicts and leaks compare the pair. Unset = one text a row."))
    label_column: str = Field("label", description=(
        "Label column (classification); each distinct label is a class (a whole number stored as 1.0 is the class "
        "'1'). Refused as values, not classes: over 20 distinct numbers with fractions (a score; there is no "
        "regression task), or most rows in labels too rare to split (free text, ids)."))
    prompt_column: str = Field("prompt", description="Prompt column (causal_lm); no loss on its tokens.")
    response_column: str = Field("response", description="Response column (causal_lm); the loss is on these tokens.")
    system_column: str | None = Field(None, description=(
        "Optional system-prompt column beside prompt/response, Alpaca's or ShareGPT's columns (causal_lm)."))
    chat_format: Literal["auto", "messages", "sharegpt", "alpaca", "prompt_response"] = Field("auto", description=(
        "How causal_lm rows hold conversations; auto = from the first row's columns, the first of: messages_column "
        "(messages), conversations_column (sharegpt), instruction_column and output_column (alpaca), prompt_column "
        "and response_column (prompt_response). The data report names the one read."))
    messages_column: str = Field("messages", description=(
        "Column of conversations (causal_lm chat_format messages): a list of {role, content} (system, user, "
        "assistant), OpenAI's chat format; the loss is on the assistant turns."))
    conversations_column: str = Field("conversations", description=(
        "Column of ShareGPT conversations (causal_lm chat_format sharegpt): a list of {from, value}; from human/user "
        "= user, gpt/assistant/model/bot/chatgpt = assistant, system = system, function_call = assistant, "
        "observation/tool = user (LLaMA-Factory's tool turns); other roles need data.roles."))
    roles: dict[str, Literal["user", "assistant", "system"]] = Field(default_factory=dict, description=(
        "Extra conversation roles and what they are, on top of the built-in ShareGPT ones (and of OpenAI's in a "
        "messages column), e.g. {function: assistant, prompter: user}; names compare case-insensitively."))
    instruction_column: str = Field("instruction", description=(
        "Alpaca's instruction column (causal_lm chat_format alpaca); with a non-empty input the user turn is "
        "instruction, a blank line, input (\"{instruction}\\n\\n{input}\", as Alpaca's template joins them)."))
    input_column: str = Field("input", description=(
        "Alpaca's optional input column, joined to the instruction (never dropped when non-empty); a file without it "
        "has instructions alone."))
    output_column: str = Field("output", description=(
        "Alpaca's output column: the assistant's reply, which carries the loss."))
    chat_template: str = Field("auto", description=(
        "How causal_lm conversations become text: auto = the model's own chat template when its tokenizer has one, "
        "else plain; model = its own (an error if none); none = plain (prompt, newline, response, end-of-sequence "
        "token); or a Jinja template file."))
    splits: SplitSizes = Field(default_factory=SplitSizes, description="Train/validation/test sizes.")
    max_seq_len: int | None = Field(None, ge=8, description=(
        "Token limit; unset = cover the 99th percentile of lengths."))
    drop_duplicates: bool = Field(True, description=(
        "Drop rows whose text (causal_lm: the whole conversation) repeats an earlier row."))
    normalize: bool = Field(True, description=(
        "Compare texts after Unicode NFKC, case folding and whitespace collapsing (duplicates, conflicts, leaks); a "
        "classifier's labels too: spellings equal so ('Positive', 'positive') are one class, named by the most "
        "frequent, and data.allowed_labels match them."))
    drop_conflicts: bool = Field(True, description=(
        "Drop every row of a text that appears with different labels (classification)."))
    allowed_labels: list[str] | None = Field(None, min_length=2, description=(
        "Labels to keep; rows with any other label are dropped. Unset = keep all."))
    drop_rare_classes: bool = Field(True, description=(
        "Drop classes with fewer rows than splits (each split needs one of every class)."))
    drop_leaked: bool = Field(True, description=(
        "Remove from train every row whose text also appears in validation or test."))
    group_by_length: bool = Field(True, description=(
        "Train and evaluate on batches of rows of similar token length (transformers' group_by_length: shuffled "
        "groups of up to 50 batches, sorted by length inside each): less padding, the same accuracy. false = random "
        "batches, each padded to its longest row."))
    too_long: Literal["truncate", "drop"] = Field("truncate", description=(
        "Rows longer than max_seq_len tokens (per candidate tokenizer): truncate or drop."))
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

    @model_validator(mode="after")
    def _text_pair(self) -> "DataConfig":
        if self.text_pair_column is None:
            return self
        if self.task != Task.classification:
            raise ValueError(
                f"text_pair_column '{self.text_pair_column}' is for a classifier of text pairs (task: classification), "
                f"but task is {self.task.value}; remove text_pair_column, or set task: classification")
        if self.text_pair_column in (self.text_column, self.label_column):
            raise ValueError(
                f"text_pair_column '{self.text_pair_column}' is also the text or the label column (text_column "
                f"'{self.text_column}', label_column '{self.label_column}'); name the column of the pair's second text")
        return self


def source_name(gguf_file: Any, hub_id: Any, path: Any) -> str | None:
    """A candidate's default name, from the most specific part of its source: the GGUF file's name without .gguf,
    a hub id's repository, a pkg:// path's package, a local folder's name; None where none is given. Characters a
    name may not hold become '-'."""
    if isinstance(gguf_file, str) and gguf_file.strip():
        found = gguf_file.strip().rsplit("/", 1)[-1].removesuffix(".gguf")
    elif isinstance(hub_id, str) and hub_id.strip():
        found = hub_id.strip().rstrip("/").rsplit("/", 1)[-1]
    elif isinstance(path, str) and path.strip():
        source = path.strip().rstrip("/")
        found = (source.removeprefix(PACKAGE_SCHEME).split("/", 1)[0] if source.startswith(PACKAGE_SCHEME)
                 else source.replace("\\", "/").rsplit("/", 1)[-1])
    else:
        return None
    return safe_name(found) or None


def safe_name(text: str) -> str:
    """`text` with every run of characters NAME_PATTERN refuses made one '-' (none at either end)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


class ModelCandidate(Section):
    """One candidate model: a local folder, a hub id (online users), or a GGUF file."""

    # The default is never validated: _name_from_source fills it from the source, or _one_source refuses the entry.
    name: str = Field(None, description=(
        "Short name used in the space, in MLflow and in the export. Unset: from the source: a GGUF file's name "
        "without .gguf, a hub id's last part, a pkg:// path's package, a folder's name (two candidates on one source "
        "need names of their own)."), pattern=NAME_PATTERN)
    path: str | None = Field(None, description=(
        "Local model folder; relative to the sweep file, or pkg://package/inside/path."))
    hub_id: str | None = Field(None, description="Hugging Face hub id, for machines that can download.")
    gguf_file: str | None = Field(None, description=(
        "GGUF file name inside `path` (or in the hub repo `hub_id`): dequantized once per machine into "
        "~/.cache/finesweep/gguf ($FINESWEEP_CACHE), which every load of every sweep then reads."))
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) for hub_id.")
    config_overrides: dict[str, Any] = Field(default_factory=dict, description=(
        "Config fields to change at load, e.g. num_hidden_layers: 3."))
    pooling: Literal["cls", "mean"] = Field("cls", description=(
        "What a classifier's head reads: cls (the first token, transformers' own head) or mean (the mean of the token "
        "states; BERT-family encoders, suited to sentence-transformers checkpoints). A mean export carries its "
        "modeling file: load it with trust_remote_code=True."))
    gguf_origin: str | None = Field(None, description=(
        "Set by finesweep, not in a sweep file: the GGUF file that `path` (its dequantized copy in the machine's "
        "cache) was made from; the model card names it."))

    @model_validator(mode="before")
    @classmethod
    def _name_from_source(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("name") is not None:
            return data
        name = source_name(data.get("gguf_file"), data.get("hub_id"), data.get("path"))
        return {**data, "name": name} if name else data

    @model_validator(mode="after")
    def _one_source(self) -> "ModelCandidate":
        if (self.path is None) == (self.hub_id is None):
            raise ValueError(
                f"model '{self.name or '(unnamed)'}' needs exactly one of `path` (a local folder) or `hub_id`, "
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


class ResourcesConfig(Section):
    """What each trial and the probe may use."""

    cpus_per_trial: float = Field(2, gt=0, description=(
        "CPU cores reserved for one trial (per worker). On a local Ray, at most the cores the sweep may use (its CPU "
        "affinity, within a cgroup quota): lowered, with a warning, where a trial would ask for more."))
    gpus_per_trial: float | None = Field(None, ge=0, description=(
        "GPUs for one trial (a fraction shares a GPU). Unset: none without CUDA; with CUDA, a share of one GPU sized "
        "by the probe's peak memory, or whole GPUs round-robin when each trial needs one. 0 trains on the CPU even "
        "where CUDA is present."))
    workers_per_trial: int = Field(1, ge=1, description=(
        "Data-parallel world size of each trial: above 1, that many Ray Train workers (torch.distributed), each with "
        "cpus_per_trial and gpus_per_trial (0 or 1); effective batch = micro x accumulation x workers."))
    deepspeed_stage: Literal[0, 2, 3] = Field(0, description=(
        "DeepSpeed ZeRO stage of every trial (2: optimizer state and gradients partitioned over the ranks, 3: "
        "parameters too); 0 = off. Needs CUDA and the deepspeed package."))
    memory_budget: str = Field("6GiB", json_schema_extra={"pattern": BYTES_PATTERN}, description=(
        "CPU: memory the concurrently running trials may use together (e.g. 6GiB); each trial's probe gets an equal "
        "share."))
    max_micro_batch: int | None = Field(None, ge=1, description=(
        "Largest micro-batch the probe tries; unset = the largest effective batch."))
    micro_batch: Literal["fastest", "largest"] = Field("fastest", description=(
        "Micro-batch trials use: the probe's fastest (samples/s) fitting one, or the largest that fits."))
    gradient_checkpointing: Literal["auto", "on", "off"] = Field("auto", description=(
        "Recompute activations in the backward pass to fit a larger micro-batch. auto: where the largest effective "
        "batch needs gradient accumulation, the probe also measures with checkpointing and each trial trains with the "
        "plan whose measured samples/s is higher; on or off: always or never."))

    @field_validator("memory_budget")
    @classmethod
    def _a_byte_size(cls, value: str) -> str:
        parse_bytes(value)  # its error names the rule and the fix
        return value

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


# export.quantization auto: bitsandbytes (memory) and the fast CPU variant (speed).
AUTO_QUANTIZATION = (Quantization.int8, Quantization.onnx_int8)


class ExportConfig(Section):
    """What is done with the best checkpoint."""

    quantization: Annotated[list[Quantization], Field(min_length=1)] | Literal["auto"] = Field("auto", description=(
        "Exports to make and measure: none; int8, nf4 (bitsandbytes); torchao-int8 (CPU), torchao-int4 (CUDA 8.0+), "
        "torchao-fp8 (CUDA 8.9+); onnx-int8 (the fast CPU path); gguf-q8_0, gguf-q4_k_m (a causal LM for llama.cpp). "
        "auto: int8 and onnx-int8, trimmed where search.time_limit is short; a list stands."))
    output_dir: str | None = Field(None, description="Export folder; unset = <sweep folder>/export.")
    max_metric_drop: float = Field(0.01, ge=0, description=(
        "Warn when a quantized model's metric falls by more than this."))
    generation_samples: int = Field(32, ge=0, description=(
        "causal_lm: greedy answers to the first this many test prompts, from the full model, each quantized one, the "
        "baseline's checkpoint and the untuned base, scored (exact match, token F1, ROUGE-L) in the model card; 0 = "
        "off. Fewer (at least 4) where search.time_limit leaves too little."))
    register_model: bool = Field(True, description=(
        "Register each exported variant in the MLflow model registry (a new version each export, alias = variant)."))
    registered_model_name: str | None = Field(None, description=(
        "Registered model name; unset = the sweep's name."), min_length=1)

    def resolved(self) -> ExportConfig:
        """This section with quantization auto as it stands where no time limit trims it (AUTO_QUANTIZATION)."""
        if self.quantization != "auto":
            return self
        return self.model_copy(update={"quantization": list(AUTO_QUANTIZATION)})


def _raw_task(data: Any) -> Task | None:
    """The task a sweep file's raw mapping names (DataConfig's default where its data section names none), for the
    defaults that depend on it; None where there is no data section or its task is not one (DataConfig says why)."""
    section = data.get("data") if isinstance(data, dict) else None
    if isinstance(section, DataConfig):
        return section.task
    if not isinstance(section, dict):
        return None
    try:
        return Task(section.get("task", DataConfig.model_fields["task"].default))
    except ValueError:
        return None


class SweepConfig(Section):
    """A whole sweep file."""

    name: str = Field(description=(
        "Sweep name: the folder under output_root and the MLflow experiment."), pattern=NAME_PATTERN)
    seed: int = Field(42, description="Seed of splits, sampler and training.")
    output_root: str = Field("runs", description=(
        "Folder holding each sweep's folder (relative to the working directory)."))
    trust_remote_code: bool = Field(False, description="Allow model code from the model folder or hub to run.")
    data: DataConfig = Field(description="Where the data is and how to read it (data.*).")
    models: list[ModelCandidate] = Field(min_length=1, description="Candidate models.")
    space: SpaceConfig = Field(default_factory=SpaceConfig, description="The search space (space.*).")
    search: SearchConfig = Field(default_factory=SearchConfig, description=(
        "How trials are sampled, run and stopped (search.*)."))
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description=(
        "What each trial and the probe may use (resources.*)."))
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description=(
        "Where MLflow records the sweep (tracking.*)."))
    export: ExportConfig = Field(default_factory=ExportConfig, description=(
        "What is done with the best checkpoint (export.*)."))

    @model_validator(mode="before")
    @classmethod
    def _effective_batch_by_task(cls, data: Any) -> Any:
        """A causal LM's space without effective_batch_size searches CAUSAL_LM_EFFECTIVE_BATCHES (a dumped config,
        as a resume reads, names the field and keeps it)."""
        space = data.get("space", {}) if isinstance(data, dict) else None
        if _raw_task(data) != Task.causal_lm or not isinstance(space, dict) or "effective_batch_size" in space:
            return data
        return {**data, "space": {**space, "effective_batch_size": list(CAUSAL_LM_EFFECTIVE_BATCHES)}}

    @model_validator(mode="before")
    @classmethod
    def _metric_by_task(cls, data: Any) -> Any:
        """A search without a metric optimises its task's (TASK_DEFAULT_METRIC), its mode following unless set (a
        dumped config names both and keeps them)."""
        search = data.get("search", {}) if isinstance(data, dict) else None
        task = _raw_task(data)
        if task is None or not isinstance(search, dict) or "metric" in search:
            return data
        return {**data, "search": {**search, "metric": TASK_DEFAULT_METRIC[task]}}

    @model_validator(mode="after")
    def _space_names_models(self) -> "SweepConfig":
        names = [m.name for m in self.models]
        if repeated := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(
                f"model names must be unique, but models {names} repeat {repeated} (a name left out is taken from the "
                "model's source); give each entry a `name:` of its own, e.g. minilm-mean and minilm-cls")
        unknown = [n for n in (self.space.model or []) if n not in names]
        if unknown:
            raise ValueError(
                f"space.model names {unknown} that no entry of `models` has; known names are {names}"
            )
        problems = [f"search.initial_points[{i}]: {problem}" for i, point in enumerate(self.search.initial_points)
                    if (problem := self.space.point_problem(point, self.model_names))]
        problems += self._baseline_problems()
        problems += [problem] if (problem := self.search.metric_problem(self.data.task)) else []
        if problems:
            raise ValueError("; ".join(problems))
        gguf = [q.value for q in self.export.resolved().quantization if q.is_gguf]
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
        if recipe.budget == "equal" and self.resources.workers_per_trial > 1:
            problems.append(f"search.baseline.budget: equal trains the baseline again in one process, but "
                            f"resources.workers_per_trial is {self.resources.workers_per_trial}; set budget: trial, "
                            "or workers_per_trial: 1")
        return problems

    @property
    def model_names(self) -> list[str]:
        """The candidates the space chooses from."""
        return self.space.model or [m.name for m in self.models]

    @property
    def baseline_model(self) -> str:
        """The candidate the baseline trains: search.baseline.model, else the first of the space's models with
        transformers' own head (pooling cls: what a plain Trainer run builds), else the first."""
        recipe = self.search.baseline
        if isinstance(recipe, BaselineRecipe) and recipe.model:
            return recipe.model
        return next((name for name in self.model_names if self.candidate(name).pooling == "cls"), self.model_names[0])

    def candidate(self, name: str) -> ModelCandidate:
        """The model entry called `name`."""
        return next(m for m in self.models if m.name == name)
