"""The sweep file's `space:` section: the dimensions the search samples, their ranges, and the defaults of those the
file leaves out (the learning rate by method, the effective batch by task)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from finesweep.spaces.sections import Method, Precision, Section, Task


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
# None, or auto until the plan resolves it: search/budget/dropout_default.py).
FLOAT_DIMENSIONS = ("learning_rate", "warmup_ratio", "weight_decay", "dropout")
CHECKPOINT_DROPOUT, AUTO_DROPOUT = "checkpoint", "auto"  # the words for the checkpoint's own and the plan's pick
# space.lora_alpha's default: alpha = LORA_ALPHA_PER_RANK x r, not searched. peft scales the adapters' update by
# alpha / r, so the pairing keeps that scale at 2 whatever rank a trial draws, and each rank's learning rate means
# the same step size; 2r is what the common LoRA recipes set (r 16, alpha 32), and Raschka's LoRA experiments
# ("Practical Tips for Finetuning LLMs Using LoRA", 2023) found it the best of the ratios tried. A searched alpha
# multiplies the LoRA configurations a small budget compares without a prior that it pays.
AUTO_LORA_ALPHA, LORA_ALPHA_PER_RANK = "auto", 2


def _is_number(text: str) -> bool:
    """Whether `text` reads as a number (pydantic then takes "0.05" as 0.05, as it would without this field's words)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class SpaceConfig(Section):
    """The search space. A list is a categorical choice; {low, high} a range; a plain value is fixed."""

    learning_rate: LearningRateDim = Field(default_factory=_default_lr, description=(
        "Peak learning rate: a value, a range, or one per method ({full: {low: 1.0e-5, high: 2.0e-4, log: true}, "
        "lora: ...}; a method left out takes its default; ranges on one scale). Unset = log-uniform by method: full "
        "1e-5..2e-4, lora and qlora 5e-5..1e-3, each method in its own range."))
    effective_batch_size: list[Annotated[int, Field(ge=1)]] = Field(
        list(CLASSIFIER_EFFECTIVE_BATCHES), min_length=1, description=(
        "Samples per optimizer step (a list to search); the probe picks the micro-batch and the gradient accumulation "
        "that make it up. Unset: [16, 32] for a classifier, [8, 16] for a causal LM."))
    precision: list[Precision] = Field([Precision.fp32, Precision.bf16], min_length=1, description=(
        "Training precisions to try."))
    model: list[str] | None = Field(None, description="Candidate names to try; unset = every entry of `models`.")
    method: list[Method] = Field([Method.full], min_length=1, description=(
        "full fine-tuning, lora, and/or qlora (LoRA on the base loaded in 4-bit NF4 with double quantization, "
        "computing in the trial's precision; bitsandbytes)."))
    lora_r: list[Annotated[int, Field(ge=1)]] = Field([8, 16], min_length=1, description=(
        "LoRA rank (only sampled for lora and qlora)."))
    lora_alpha: list[Annotated[int, Field(ge=1)]] | Literal["auto"] = Field(AUTO_LORA_ALPHA, description=(
        "LoRA alpha: a list to search (only sampled for lora and qlora), or auto: twice each trial's lora_r, the "
        "usual pairing, so a rank's adapters keep one scale (alpha / r = 2) and the search spends no trials on it."))
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    warmup_ratio: FloatDim = Field(0.06, description="Fraction of max_steps spent warming up.")
    weight_decay: FloatDim = Field(0.01, description="AdamW weight decay.")
    freeze_embeddings: bool = Field(True, description=(
        "A classifier's full fine-tuning keeps the word embeddings as the checkpoint has them (no gradient, no "
        "optimizer state). A causal LM and the baseline train them; LoRA freezes its whole base anyway. false: they "
        "train."))
    dropout: FloatDim | Literal["auto"] | None = Field("auto", description=(
        "Every dropout rate of the model (hidden, attention, head): a value, a range, `checkpoint` (its own, 0.1 for "
        "BERT encoders) or auto: 0 where one model trains at most 2 passes over the training split (within a trial's "
        "and search.exploit.max_epochs), else the checkpoint's. The baseline keeps its own."))

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
            if key == "lora_alpha" and not self.searches_lora_alpha:
                return (f"lora_alpha is not searched (space.lora_alpha is {AUTO_LORA_ALPHA}: {LORA_ALPHA_PER_RANK} x "
                        "the point's lora_r); leave it out of the point, or set space.lora_alpha to a list")
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

    @property
    def searches_lora_alpha(self) -> bool:
        """Whether lora_alpha is a dimension of the search (a list), not derived from the rank (auto)."""
        return self.lora_alpha != AUTO_LORA_ALPHA

    def derived_lora_alpha(self, rank: int) -> dict[str, int]:
        """A LoRA trial's alpha where the space derives it from the trial's rank (auto), as a constant of the trial's
        configuration; empty where alpha is searched."""
        return {} if self.searches_lora_alpha else {"lora_alpha": LORA_ALPHA_PER_RANK * rank}

    def with_auto_dropout(self, rate: float | None) -> SpaceConfig:
        """This space as the trials sample it: dropout auto replaced by the rate the plan resolved it to
        (search/budget/dropout_default.py); a space whose dropout the file sets, as it is."""
        return self.model_copy(update={"dropout": rate}) if self.dropout == AUTO_DROPOUT else self

    def with_learning_rates(self, narrowed: dict[str, list[float]]) -> SpaceConfig:
        """This space with the learning-rate ranges of the methods in `narrowed` (method -> [low, high], what the
        range test left: search/range_test.py) in place of the file's, on the file's scale; the rest as they are."""
        if not narrowed:
            return self
        ranges = {m.value: self.float_dimension("learning_rate", m) for m in self.method}
        for method, (low, high) in narrowed.items():
            ranges[method] = FloatRange(low=low, high=high, log=ranges[method].log)
        if len(self.method) == 1:
            return self.model_copy(update={"learning_rate": ranges[self.method[0].value]})
        return self.model_copy(update={"learning_rate": MethodLearningRates.model_validate(ranges)})

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
