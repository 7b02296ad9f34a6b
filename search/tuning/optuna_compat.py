"""Every private name of Optuna that finesweep relies on, and nothing else.

Checked on optuna 5.0 and 5.1 (the lock's since 2026-12-03, the newest pyproject.toml admits);
tests/search/tuning/test_optuna_compat.py fails, naming the installed version, when an Optuna release changes it.
"""

from __future__ import annotations

from typing import Any, Callable

from optuna.samplers import GridSampler, TPESampler


def keep_grid_points(sampler: GridSampler, keep: Callable[[dict[str, Any]], bool]) -> None:
    """Narrow a GridSampler to the grid points `keep` accepts. GridSampler holds the whole product, shuffled by its
    seed, in `_all_grids` (each point a tuple in `_param_names` order); a trial's grid id indexes that list, and
    `_n_min_trials` is its length. There is no public way to run a subset of a product."""
    kept = [point for point in sampler._all_grids if keep(dict(zip(sampler._param_names, point)))]
    sampler._all_grids, sampler._n_min_trials = kept, len(kept)


def grid_points(sampler: GridSampler) -> list[dict[str, Any]]:
    """The points a GridSampler will run, in its order."""
    return [dict(zip(sampler._param_names, point)) for point in sampler._all_grids]


def tpe_startup_trials_of(sampler: TPESampler) -> int:
    """The n_startup_trials a TPESampler was made with (kept in `_n_startup_trials`; no public accessor)."""
    return sampler._n_startup_trials
