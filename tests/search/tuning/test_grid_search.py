"""Grid search as a baseline: Optuna's GridSampler through the same ask-and-tell path Ray Tune's OptunaSearch uses,
each distinct point once. The end-to-end grid sweep is in test_cluster.py (it runs on a separately started head)."""

from __future__ import annotations

import optuna
import pytest

from finesweep.search.tuning.samplers import DistinctGridSampler
from finesweep.spaces import suggest
from finesweep.spaces.space_config import SpaceConfig
from finesweep.spaces.grid import grid, grid_points, grid_size, method_rates
from finesweep.spaces.space import unsuggested


def _sampled_points(space: SpaceConfig, models: list[str], precisions: list[str], points: int) -> list[dict]:
    """Ask and tell as OptunaSearch does (define-by-run `suggest`), once per distinct grid point."""
    values = grid(space, models, precisions, points)
    rates = method_rates(space, values, points)
    study = optuna.create_study(sampler=DistinctGridSampler(values, 0, rates))
    sampled = []
    for _ in range(grid_size(values, rates)):
        trial = study.ask()
        suggest(trial, space, models, precisions)
        study.tell(trial, 0.0)  # GridSampler's own study.stop() after the last point would raise here
        sampled.append(dict(trial.params))
    return sampled


def _trained(point: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in point.items() if k not in unsuggested(point)))


def test_the_sampler_visits_every_distinct_point_once_even_with_conditional_lora_dimensions():
    space = SpaceConfig(method=["full", "lora"], lora_r=[4, 8], lora_alpha=[8, 16, 32], effective_batch_size=[8, 16],
                        learning_rate={"low": 1e-4, "high": 1e-2, "log": True}, warmup_ratio={"low": 0.0, "high": 0.2})
    sampled = _sampled_points(space, ["a", "b"], ["fp32"], 3)
    expected = [_trained(p) for p in grid_points(grid(space, ["a", "b"], ["fp32"], 3))]
    assert len(sampled) == len(expected) == 2 * 2 * 3 * 3 * (1 + 2 * 3)
    assert sorted(map(_trained, sampled)) == sorted(expected), "each distinct configuration exactly once"
    full = [p for p in sampled if p["method"] == "full"]
    assert full and all("lora_r" not in p and "lora_alpha" not in p for p in full)


def test_each_method_samples_the_grid_of_its_own_learning_rate_range():
    space = SpaceConfig(method=["full", "lora"], lora_r=[8], lora_alpha=[16], effective_batch_size=[8])
    sampled = _sampled_points(space, ["a"], ["fp32"], 3)
    by_method = {m: sorted(p["learning_rate"] for p in sampled if p["method"] == m) for m in ("full", "lora")}
    assert by_method["full"] == [1e-5, pytest.approx(4.472e-5, rel=1e-3), 2e-4]
    assert by_method["lora"] == [5e-5, pytest.approx(2.236e-4, rel=1e-3), 1e-3]


def test_the_seed_fixes_the_order_so_a_partial_grid_is_reproducible():
    space = SpaceConfig(learning_rate={"low": 1e-4, "high": 1e-2, "log": True}, effective_batch_size=[8, 16, 32])
    values = grid(space, ["a"], ["fp32"], 4)
    orders = []
    for _ in range(2):
        study = optuna.create_study(sampler=DistinctGridSampler(values, seed=11))
        trials = [study.ask() for _ in range(5)]
        orders.append([(suggest(t, space, ["a"], ["fp32"]), dict(t.params))[1] for t in trials])
    assert orders[0] == orders[1] and len({_trained(p) for p in orders[0]}) == 5


def test_tpe_starts_from_the_trials_a_step_budget_pays_for():
    from finesweep.search.tuning.samplers import planned_trials
    from finesweep.spaces import SweepConfig

    from finesweep.search.budget.plan import unplanned

    def trials(**search) -> int:
        config = SweepConfig.model_validate({"name": "s", "data": {"path": "x.csv"},
                                             "models": [{"name": "m", "path": "m"}],
                                             "search": {"max_steps": 40, "eval_every_steps": 8, **search}})
        return planned_trials(config, unplanned(config, 1))

    assert trials(num_trials=30) == 30
    assert trials(num_trials=100, step_budget=240) == 6  # six trials at full length
    assert trials(num_trials=4, step_budget=240) == 4
    assert trials(num_trials=100, step_budget=10) == 1
