"""Optuna internals finesweep relies on (search/tuning/optuna_compat.py), pinned against the installed Optuna."""

from __future__ import annotations

import optuna

from finesweep.search.tuning import optuna_compat

CHECKED = (f"(checked on optuna 5.0 and 5.1; installed: optuna {optuna.__version__}): update "
           "search/tuning/optuna_compat.py")


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


def test_a_tpe_samplers_startup_count_is_read_back_and_is_its_random_phase():
    sampler = optuna.samplers.TPESampler(seed=5, n_startup_trials=3)
    assert optuna_compat.tpe_startup_trials_of(sampler) == 3, CHECKED

    def sampled(sampler) -> list[float]:
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) ** 2, n_trials=5)
        return [t.params["x"] for t in study.trials]

    tpe, uniform = sampled(sampler), sampled(optuna.samplers.RandomSampler(seed=5))
    assert tpe[:3] == uniform[:3] and tpe[3:] != uniform[3:], f"TPE's random phase is not n_startup_trials {CHECKED}"
