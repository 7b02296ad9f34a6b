"""The search space as an Optuna define-by-run function (conditional LoRA dimensions need it)."""

from __future__ import annotations

from typing import Any, Protocol

from finesweep.spaces.config import FloatRange, Method, SpaceConfig


class SuggestingTrial(Protocol):
    """The part of `optuna.Trial` the space uses (kept structural so spaces never imports optuna's runtime)."""

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


def suggest(trial: SuggestingTrial, space: SpaceConfig, models: list[str], precisions: list[str]) -> dict[str, Any]:
    """Sample one trial's hyperparameters; returns the fixed (not searched) ones as constants."""
    trial.suggest_categorical("model", models)
    trial.suggest_categorical("precision", precisions)
    trial.suggest_categorical("effective_batch_size", list(space.effective_batch_size))
    method = trial.suggest_categorical("method", [m.value for m in space.method])
    if method == Method.lora.value:
        trial.suggest_categorical("lora_r", list(space.lora_r))
        trial.suggest_categorical("lora_alpha", list(space.lora_alpha))
    fixed: dict[str, Any] = {}
    for name in ("learning_rate", "warmup_ratio", "weight_decay"):
        dim = getattr(space, name)
        if isinstance(dim, FloatRange):
            trial.suggest_float(name, dim.low, dim.high, log=dim.log)
        else:
            fixed[name] = dim
    return fixed

