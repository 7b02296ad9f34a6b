"""Optuna internals finesweep relies on (search/tuning/optuna_compat.py), pinned against the installed Optuna."""

from __future__ import annotations

import optuna

from finesweep.search.tuning import optuna_compat

CHECKED = f"(checked on optuna 5.0; installed: optuna {optuna.__version__}): update search/tuning/optuna_compat.py"


def test_a_narrowed_grid_sampler_runs_exactly_the_kept_points():
    values = {"a": [1, 2, 3], "b": ["x", "y"]}
    sampler = optuna.samplers.GridSampler(values, seed=3)
    optuna_compat.keep_grid_points(sampler, lambda point: point["a"] != 2)
    kept = optuna_compat.grid_points(sampler)
    assert sorted((p["a"], p["b"]) for p in kept) == [(1, "x"), (1, "y"), (3, "x"), (3, "y")], CHECKED
    study, seen = optuna.create_study(sampler=sampler), []

    def objective(trial):
        seen.append((trial.suggest_categorical("a", values["a"]), trial.suggest_categorical("b", values["b"])))
        return 0.0

    study.optimize(objective, n_trials=10)  # GridSampler stops the study after its last point
    assert sorted(seen) == sorted((p["a"], p["b"]) for p in kept), f"GridSampler ignores _all_grids {CHECKED}"
    assert seen == [(p["a"], p["b"]) for p in kept], "in the sampler's (seeded) order"
