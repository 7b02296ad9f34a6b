"""How trials are chosen and stopped: Optuna's sampler through Tune's OptunaSearch (TPE, random or grid), and ASHA."""

from __future__ import annotations

import functools
from typing import Any

from optuna.samplers import GridSampler
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from finesweep.search.budget.plan import SearchPlan
from finesweep.search.selection.pareto import search_objectives
from finesweep.search.tuning import optuna_compat
from finesweep.spaces import SweepConfig
from finesweep.spaces.grid import MethodRates, distinct, grid, method_rates
from finesweep.spaces.space import BASELINE_KEY, baseline_point, centre_point, suggest_or_baseline


class DistinctGridSampler(GridSampler):
    """Optuna's GridSampler over the grid's distinct configurations only, without its stop at the end.

    GridSampler runs the whole product of the grid's values. A trial that never asks for a conditional dimension
    (lora_r, lora_alpha under full fine-tuning) would train the same configuration once per value of it, so the
    product is narrowed to the points `spaces.grid.distinct` keeps. GridSampler's `study.stop()` after the last
    point works only inside `study.optimize`; under Ray Tune (ask and tell) it raises, and Tune's num_samples
    (capped at the grid's size) ends the search anyway. Module level: Tune pickles the searcher with its sampler.
    """

    def __init__(self, values: dict[str, list[Any]], seed: int, rates: MethodRates = None):
        super().__init__(values, seed=seed)
        optuna_compat.keep_grid_points(self, lambda point: distinct(point, values, rates))

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_searcher(config: SweepConfig, plan: SearchPlan, precisions: list[str]):
    """Optuna through Ray Tune: multivariate TPE (seeded), or random or grid search as a baseline, over the space
    as the plan leaves it (SearchPlan.sampled_space: dropout auto resolved, learning rates the range test narrowed)."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    baseline = sweep_baseline(config, precisions)
    sampled = plan.sampled_space(config.space)
    points = first_points(config.model_copy(update={"space": sampled}), precisions, (baseline or {}).get("method"))
    if baseline is not None and points:
        points.insert(0, {})  # the baseline takes the study's first trial: the points follow it, none lost
    if config.search.algorithm == "tpe":
        # Optuna counts the baseline and the enqueued points among its start-up trials: the random draws come on
        # top of them. With only those two told, TPE's first model drew a near copy of the better one (lr 4.44e-5
        # after the centre's 4.47e-5, its batch and precision) and spent one of a small sweep's trials learning
        # nothing. With a step budget, num_trials is only a ceiling: the trials the budget pays for are the budget.
        fixed = len(points) or int(baseline is not None)
        sampler = optuna.samplers.TPESampler(
            seed=config.seed, multivariate=True,
            n_startup_trials=fixed + tpe_startup_trials(max(planned_trials(config, plan) - fixed, 1)))
    elif config.search.algorithm == "grid":
        values = grid(sampled, config.model_names, precisions, config.search.grid_points)
        rates = method_rates(sampled, values, config.search.grid_points)
        sampler = DistinctGridSampler(values, config.seed, rates)
    else:
        sampler = optuna.samplers.RandomSampler(seed=config.seed)
    space = functools.partial(suggest_or_baseline, space=sampled, models=config.model_names, precisions=precisions,
                              baseline=baseline)
    # With a second objective, metric and mode are lists and the study has two directions (TPE, random and grid
    # all sample for it). OptunaSearch then tells each trial's LAST result, [metric, throughput], when the trial
    # ends (it skips intermediate reports for several objectives); the throughput there is the trial's own average.
    metric, mode = search_objectives(config.search)
    return OptunaSearch(space=space, sampler=sampler, metric=metric, mode=mode,
                        points_to_evaluate=points or None)


def first_points(config: SweepConfig, precisions: list[str],
                 baseline_method: str | None = None) -> list[dict[str, Any]]:
    """What the sampler tries before it samples: the user's initial points, or else (TPE) the space's centre, which
    tells its model more than a random first draw. Random and grid searches sample from the start."""
    if config.search.initial_points:
        return [dict(point) for point in config.search.initial_points]
    if config.search.algorithm != "tpe":
        return []
    return [centre_point(config.space, config.model_names, precisions, baseline_method)]


def sweep_baseline(config: SweepConfig, precisions: list[str]) -> dict[str, Any] | None:
    """The baseline trial's hyperparameters (search.baseline), or None. A grid search runs none: it is itself the
    exhaustive baseline, and each of its trials is a point of the grid."""
    if config.search.algorithm == "grid":
        return None
    return baseline_point(config.search.baseline, config.space, config.baseline_model, precisions)


def tpe_startup_trials(num_trials: int) -> int:
    """How many of `num_trials` sampled trials TPE draws at random before it models the results (after the
    baseline and the first points, make_searcher). Optuna's default is 10; a sweep of a handful of trials would
    never leave that phase, so a third of them (at least 2, at most 10)."""
    return min(10, max(2, num_trials // 3))


def planned_trials(config: SweepConfig, plan: SearchPlan) -> int:
    """How many trials the sweep expects to run: the plan's number, or fewer when a step budget pays for fewer."""
    step_budget = config.search.step_budget
    if step_budget is None:
        return plan.num_trials
    return max(1, min(plan.num_trials, step_budget // plan.max_steps))


class BaselineKeepingASHA(ASHAScheduler):
    """ASHA that never stops the baseline trial: its results still fill the rungs the other trials are judged at,
    but it is the reference the winner is measured against, so it trains its whole recipe."""

    def on_trial_result(self, tune_controller, trial, result) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        return TrialScheduler.CONTINUE if trial.config.get(BASELINE_KEY) else decision


def make_scheduler(config: SweepConfig, plan: SearchPlan):
    """ASHA over the plan's evaluations (each report is one evaluation), or none."""
    from ray.tune.schedulers import FIFOScheduler

    if config.search.scheduler == "none":
        return FIFOScheduler()
    evaluations = plan.evaluations
    return BaselineKeepingASHA(time_attr="training_iteration", max_t=evaluations,
                               grace_period=min(config.search.asha.grace_period, evaluations),
                               reduction_factor=config.search.asha.reduction_factor)
