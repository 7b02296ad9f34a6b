"""The search space as an Optuna define-by-run function (conditional LoRA dimensions need it)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from finesweep.spaces.config import FloatRange, Method, SpaceConfig

FLOAT_DIMENSIONS = ("learning_rate", "warmup_ratio", "weight_decay")
LORA_DIMENSIONS = ("lora_r", "lora_alpha")


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
        "lora_alpha": list(space.lora_alpha),
    }


def float_ranges(space: SpaceConfig) -> dict[str, FloatRange]:
    """The continuous dimensions that are searched (a plain value is fixed, not searched)."""
    return {name: dim for name in FLOAT_DIMENSIONS if isinstance(dim := getattr(space, name), FloatRange)}


def unsuggested(point: Mapping[str, Any]) -> tuple[str, ...]:
    """The conditional dimensions `suggest` never asks for at `point`: the LoRA ones unless the method trains adapters."""
    method = point.get("method")
    return () if method in Method.__members__ and Method(method).has_adapter else LORA_DIMENSIONS


def suggest(trial: SuggestingTrial, space: SpaceConfig, models: list[str], precisions: list[str]) -> dict[str, Any]:
    """Sample one trial's hyperparameters; returns the fixed (not searched) ones as constants."""
    choices = categorical_choices(space, models, precisions)
    point = {name: trial.suggest_categorical(name, choices[name])
             for name in ("model", "precision", "effective_batch_size", "method")}
    for name in LORA_DIMENSIONS:
        if name not in unsuggested(point):
            trial.suggest_categorical(name, choices[name])
    for name, dim in float_ranges(space).items():
        trial.suggest_float(name, dim.low, dim.high, log=dim.log)
    return {name: getattr(space, name) for name in FLOAT_DIMENSIONS if name not in float_ranges(space)}
