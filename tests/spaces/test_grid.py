"""The grid of a grid search, built from the space: values per dimension, distinct points, the trial cap."""

from __future__ import annotations

import math

import pytest

from finesweep.spaces import SweepConfig, SweepFileError, load
from finesweep.spaces.space_config import FloatRange, SpaceConfig
from finesweep.spaces.grid import (grid_configurations, grid, grid_points, grid_size, grid_trials, method_rates,
                                   range_values)
from finesweep.spaces.space import unsuggested
from tests import tiny


def test_a_linear_range_gets_evenly_spaced_values_with_both_ends():
    assert range_values(FloatRange(low=0.0, high=0.1), 3) == [0.0, 0.05, 0.1]
    assert range_values(FloatRange(low=0.0, high=0.3), 4) == [0.0, 0.1, 0.2, 0.3]


def test_a_log_range_gets_log_spaced_values_with_both_ends_exactly():
    values = range_values(FloatRange(low=1e-5, high=3e-4, log=True), 3)
    assert values[0] == 1e-5 and values[-1] == 3e-4
    assert values[1] == pytest.approx(math.sqrt(1e-5 * 3e-4), rel=1e-3)
    assert range_values(FloatRange(low=1e-4, high=1e-1, log=True), 4) == [1e-4, 1e-3, 1e-2, 1e-1]


def test_a_range_of_one_value_is_one_grid_value():
    assert range_values(FloatRange(low=0.01, high=0.01), 5) == [0.01]


def test_the_grid_lists_categorical_choices_as_given_and_only_searched_ranges():
    space = SpaceConfig(learning_rate={"low": 1e-4, "high": 1e-2, "log": True}, effective_batch_size=[32, 8],
                        precision=["bf16"], weight_decay={"low": 0.0, "high": 0.1}, warmup_ratio=0.1)
    values = grid(space, ["small", "large"], ["bf16"], 3)
    assert values == {"model": ["small", "large"], "precision": ["bf16"], "effective_batch_size": [32, 8],
                      "method": ["full"], "learning_rate": [1e-4, 1e-3, 1e-2], "weight_decay": [0.0, 0.05, 0.1]}
    assert grid_size(values) == 2 * 1 * 2 * 1 * 3 * 3


def test_lora_dimensions_are_in_the_grid_only_when_a_method_uses_them():
    assert "lora_r" not in grid(SpaceConfig(method=["full"], lora_r=[4, 8]), ["m"], ["fp32"], 2)
    lora_only = grid(SpaceConfig(method=["lora"], lora_r=[4, 8], lora_alpha=[16]), ["m"], ["fp32"], 2)
    assert lora_only["lora_r"] == [4, 8] and lora_only["lora_alpha"] == [16]
    assert grid_size(lora_only) == 2 * 2 * 2  # batches x lora_r x learning rates


def test_full_fine_tuning_points_are_not_repeated_per_lora_value():
    space = SpaceConfig(method=["full", "lora"], lora_r=[4, 8, 16], lora_alpha=[16, 32], effective_batch_size=[8])
    values = grid(space, ["m"], ["fp32"], 2)
    rates = method_rates(space, values, 2)
    # Each method's default learning-rate range, both ends: full 1e-5..2e-4, LoRA 5e-5..1e-3.
    assert values["learning_rate"] == [1e-5, 5e-5, 2e-4, 1e-3] and rates == {"full": [1e-5, 2e-4], "lora": [5e-5, 1e-3]}
    points = list(grid_points(values, rates))
    assert len(points) == grid_size(values, rates) == 2 * (1 + 3 * 2)  # learning rates x (full + each LoRA pair)
    assert all(p["learning_rate"] in rates[p["method"]] for p in points), "each method trains its own rates"
    trained = [tuple(sorted((k, v) for k, v in p.items() if k not in unsuggested(p))) for p in points]
    assert len(set(trained)) == len(trained), "no two points train the same configuration"


def test_a_method_with_a_fixed_learning_rate_is_one_grid_point_per_other_choice():
    space = SpaceConfig(method=["full", "lora"], lora_r=[8], lora_alpha=[16], effective_batch_size=[8],
                        learning_rate={"full": 5e-5, "lora": {"low": 1e-4, "high": 1e-3, "log": True}})
    values = grid(space, ["m"], ["fp32"], 3)
    rates = method_rates(space, values, 3)
    assert rates["lora"] == range_values(FloatRange(low=1e-4, high=1e-3, log=True), 3)
    assert grid_size(values, rates) == 1 + 3  # full at its one rate, LoRA at each of its three


def test_the_trial_cap_runs_a_small_grid_once_and_says_how_much_of_a_large_one_runs():
    assert grid_trials(8, 8)[0] == 8
    trials, note = grid_trials(10, 4)
    assert trials == 4 and "4 distinct configurations" in note and "search.num_trials (10)" in note
    trials, note = grid_trials(5, 12)
    assert trials == 5 and "only 5 of the grid's 12" in note and "search.num_trials: 12" in note


def _sweep(**search) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "g", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "m"}],
        "space": {"learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}, "effective_batch_size": [8, 16]},
        "search": {"algorithm": "grid", **search},
    })


def test_the_grid_caps_num_trials_at_its_size():
    config = _sweep(num_trials=50, grid_points=4)
    size = grid_configurations(config, ["fp32", "bf16"])
    trials, note = grid_trials(config.search.num_trials, size)
    assert size == trials == 4 * 2 * 2 and "16 distinct configurations" in note
    assert grid_trials(3, grid_configurations(_sweep(num_trials=3), ["fp32"]))[0] == 3


def test_the_sweep_file_takes_grid_and_rejects_grid_points_below_two_and_initial_points(tmp_path):
    base = "name: s\ndata: {path: data.csv}\nmodels: [{name: m, path: model}]\n"
    tiny.touch_sweep_inputs(tmp_path)
    (tmp_path / "ok.yaml").write_text(base + "search: {algorithm: grid, grid_points: 5}\n")
    assert load(tmp_path / "ok.yaml").search.grid_points == 5
    (tmp_path / "one.yaml").write_text(base + "search: {algorithm: grid, grid_points: 1}\n")
    with pytest.raises(SweepFileError, match="search.grid_points: Input should be greater than or equal to 2"):
        load(tmp_path / "one.yaml")
    (tmp_path / "start.yaml").write_text(base + "search: {algorithm: grid, initial_points: [{learning_rate: 1.0e-4}]}\n")
    with pytest.raises(SweepFileError) as raised:
        load(tmp_path / "start.yaml")
    assert "search: initial_points cannot be used with algorithm: grid, but got 1" in str(raised.value)
    assert "remove initial_points, or use algorithm: tpe or random" in str(raised.value)
