"""How many trials TPE samples at random before it models the results (search/tuning/samplers.py), and that the
searcher the sweep builds hands Optuna's TPESampler that number."""

from __future__ import annotations

import pytest

from finesweep.search.budget.plan import unplanned
from finesweep.search.tuning import optuna_compat
from finesweep.search.tuning.ray_compat import optuna_study_of
from finesweep.search.tuning.samplers import make_searcher, tpe_startup_trials
from finesweep.spaces import SweepConfig

MINIMAL = {"name": "s", "data": {"path": "data.csv"}, "models": [{"name": "m", "path": "model"}]}


@pytest.mark.parametrize("num_trials, startup", [
    (1, 2), (2, 2), (5, 2), (8, 2),  # at least 2, even when that is more than a third (or all) of the trials
    (9, 3), (11, 3), (12, 4), (29, 9),  # a third, rounded down
    (30, 10), (31, 10), (1000, 10),  # at most Optuna's default of 10
])
def test_a_third_of_the_trials_start_at_random_at_least_2_and_at_most_10(num_trials, startup):
    assert tpe_startup_trials(num_trials) == startup


@pytest.mark.parametrize("search, startup", [  # the baseline and the space's centre, then that many random draws
    ({"num_trials": 3}, 2 + 2),
    ({"num_trials": 12}, 2 + 3),
    ({"num_trials": 100}, 2 + 10),
    ({"num_trials": 100, "max_steps": 10, "eval_every_steps": 5, "step_budget": 120}, 2 + 3),  # the budget pays for 12 full trials, not 100
    ({"num_trials": 12, "baseline": "off"}, 1 + 3),
    ({"num_trials": 12, "initial_points": [{"learning_rate": 1e-4}, {"learning_rate": 2e-4}]}, 3 + 3),
])
def test_the_sweeps_tpe_sampler_gets_that_number_after_its_first_trials(search, startup):
    config = SweepConfig.model_validate({**MINIMAL, "search": {"algorithm": "tpe", **search}})
    sampler = optuna_study_of(make_searcher(config, unplanned(config, 1), ["fp32"])).sampler
    assert type(sampler).__name__ == "TPESampler"
    assert optuna_compat.tpe_startup_trials_of(sampler) == startup


def test_the_searcher_samples_the_learning_rates_the_range_test_narrowed():
    """A plan whose range test narrowed LoRA's range to 2e-4..1e-3: the centre and every sampled LoRA trial lie in
    it; full fine-tuning, which the test left as written, keeps its range."""
    from dataclasses import replace

    config = SweepConfig.model_validate({**MINIMAL, "space": {"method": ["full", "lora"], "effective_batch_size": [8]},
                                         "search": {"algorithm": "random", "num_trials": 30, "baseline": "off"}})
    plan = replace(unplanned(config, 1), learning_rates={"lora": [2e-4, 1e-3]})
    searcher = make_searcher(config, plan, ["fp32"])
    rates = {"full": [], "lora": []}
    for number in range(30):
        point = searcher.suggest(f"t{number}")
        rates[point["method"]].append(point["learning_rate"])
    assert rates["lora"] and all(2e-4 <= rate <= 1e-3 for rate in rates["lora"])
    assert rates["full"] and all(1e-5 <= rate <= 2e-4 for rate in rates["full"]) and min(rates["full"]) < 1e-4
