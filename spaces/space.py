"""The search space as an Optuna define-by-run function (conditional LoRA dimensions need it)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Protocol

from finesweep.spaces.sections import Method, Precision
from finesweep.spaces.space_config import FLOAT_DIMENSIONS, FloatRange, SpaceConfig
from finesweep.spaces.search_config import BaselineRecipe

LORA_DIMENSIONS = ("lora_r", "lora_alpha")
# The key a trial's config carries when it is the baseline (search.baseline), not a sample of the space.
BASELINE_KEY = "baseline"
# search.baseline's learning rate when unset: TrainingArguments' default for full fine-tuning; the QLoRA paper's
# 2e-4, the usual LoRA recipe, for adapters (a full fine-tune's rate barely moves LoRA's zero-initialised B matrix).
BASELINE_LEARNING_RATES = {Method.full: 5e-5, Method.lora: 2e-4, Method.qlora: 2e-4}


class SuggestingTrial(Protocol):
    """The part of `optuna.Trial` the space uses (kept structural so spaces never imports optuna's runtime)."""

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def categorical_choices(space: SpaceConfig, models: list[str], precisions: list[str]) -> dict[str, list[Any]]:
    """Every categorical dimension with its choices, in the order `suggest` asks for them."""
    return {
        "model": list(models),
        "precision": list(precisions),
        "effective_batch_size": list(space.effective_batch_size),
        "method": [m.value for m in space.method],
        "lora_r": list(space.lora_r),
        **({"lora_alpha": list(space.lora_alpha)} if space.searches_lora_alpha else {}),
    }


def float_ranges(space: SpaceConfig, method: str | None = None) -> dict[str, FloatRange]:
    """The continuous dimensions that are searched (a plain value is fixed, not searched), for `method`'s trials;
    without one, a learning rate that depends on the method spans every method's range."""
    dims = {name: space.float_dimension(name, method) for name in FLOAT_DIMENSIONS}
    return {name: dim for name, dim in dims.items() if isinstance(dim, FloatRange)}


def fixed_floats(space: SpaceConfig, method: str) -> dict[str, float]:
    """The continuous dimensions fixed at a value for `method`'s trials (a dropout left at the checkpoint's own, or
    auto before the plan resolved it, is none of them)."""
    return {name: value for name in FLOAT_DIMENSIONS if isinstance(value := space.float_dimension(name, method), float)}


def unsuggested(point: Mapping[str, Any]) -> tuple[str, ...]:
    """The conditional dimensions `suggest` never asks for at `point`: the LoRA ones unless the method trains adapters."""
    method = point.get("method")
    return () if method in Method.__members__ and Method(method).has_adapter else LORA_DIMENSIONS


def suggest(trial: SuggestingTrial, space: SpaceConfig, models: list[str], precisions: list[str]) -> dict[str, Any]:
    """Sample one trial's hyperparameters; returns the fixed (not searched) ones as constants (`fixed_floats`, and a
    LoRA trial's alpha where the space derives it from the rank)."""
    choices = categorical_choices(space, models, precisions)
    point = {name: trial.suggest_categorical(name, choices[name])
             for name in ("model", "precision", "effective_batch_size", "method")}
    for name in LORA_DIMENSIONS:
        if name in choices and name not in unsuggested(point):
            point[name] = trial.suggest_categorical(name, choices[name])
    # One parameter per dimension even where its range depends on the method (space.learning_rate per method):
    # Optuna takes a range that changes from trial to trial, and each trial reads its own method's.
    for name, dim in float_ranges(space, point["method"]).items():
        trial.suggest_float(name, dim.low, dim.high, log=dim.log)
    derived = space.derived_lora_alpha(point["lora_r"]) if "lora_r" in point else {}
    return {**fixed_floats(space, point["method"]), **derived}


def baseline_point(baseline: BaselineRecipe | str, space: SpaceConfig, model: str,
                   precisions: list[str]) -> dict[str, Any] | None:
    """The baseline trial's hyperparameters (every dimension `suggest` yields) on `model` (SweepConfig.baseline_model),
    or None for `off`. `precisions` are those the probe kept: the baseline trains fp32 where it is among them, as the
    Trainer does by default."""
    if baseline == "off":
        return None
    recipe = baseline if isinstance(baseline, BaselineRecipe) else BaselineRecipe()
    method = recipe.method or (Method.full if Method.full in space.method else space.method[0])
    # A precision the probe dropped (bf16 on a CPU without bf16 instructions) has no micro-batch to train with.
    wanted = recipe.precision.value if recipe.precision else Precision.fp32.value
    precision = wanted if wanted in precisions else precisions[0]
    point = {"model": model, "precision": precision, "method": method.value,
             "effective_batch_size": recipe.effective_batch_size,
             "learning_rate": recipe.learning_rate or BASELINE_LEARNING_RATES[method],
             "warmup_ratio": recipe.warmup_ratio, "weight_decay": recipe.weight_decay}
    if method.has_adapter:
        point.update(lora_r=recipe.lora_r, lora_alpha=recipe.lora_alpha)
    return point


def suggest_or_baseline(trial: Any, space: SpaceConfig, models: list[str], precisions: list[str],
                        baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The study's first trial is the baseline, when there is one: its recipe as constants (it may lie outside the
    space, so the sampler learns nothing from it); every later trial samples the space."""
    if baseline is not None and trial.number == 0:
        return {**baseline, BASELINE_KEY: True}
    return suggest(trial, space, models, precisions)


def centre_point(space: SpaceConfig, models: list[str], precisions: list[str],
                 baseline_method: str | None = None) -> dict[str, Any]:
    """The middle of the space, where a first sampled trial informs most: each searched range's centre (geometric for
    a log range: 1e-5..1e-3 -> 1e-4), the middle effective batch size (the smaller of two), the model listed first
    (the one the user leads with) and the first of `precisions` (the probe orders them fastest first). The method is
    left to the sampler (adapters or the whole model is a question the search asks, not a middle), unless the
    learning rate depends on it: a rate is a centre only of its method's range, so the centre takes the first of the
    space's methods that the baseline (`baseline_method`) does not train, which a second trial of it would repeat."""
    method = _centre_method(space, baseline_method)
    point: dict[str, Any] = {name: math.sqrt(dim.low * dim.high) if dim.log else (dim.low + dim.high) / 2
                             for name, dim in float_ranges(space, method).items()}
    if method is not None:
        point["method"] = method
    batches = sorted(space.effective_batch_size)
    point.update(effective_batch_size=batches[(len(batches) - 1) // 2], model=models[0], precision=precisions[0])
    return point


def _centre_method(space: SpaceConfig, baseline_method: str | None) -> str | None:
    """The centre's method where the learning rate depends on it (None where the sampler may choose)."""
    if not space.learning_rate_by_method:
        return None
    methods = [m.value for m in space.method]
    return next((m for m in methods if m != baseline_method), methods[0])
