"""Every private name of transformers that finesweep relies on, and nothing else. Checked on transformers 5.23;
tests/trainer/test_transformers_compat.py fails, naming the installed version, when a release changes it."""

from __future__ import annotations

from typing import Any


def search_trial_of(trainer: Any) -> Any:
    """The Optuna trial a `Trainer.hyperparameter_search(backend="optuna")` run is training (the Trainer keeps it in
    `_trial`; the search-efficiency benchmark stops the study from a callback through it)."""
    return trainer._trial
