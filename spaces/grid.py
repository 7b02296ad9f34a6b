"""The grid of a grid search, built from the space: the baseline that TPE and random search are measured against.

Optuna's GridSampler takes the grid as a plain dict of lists (built here) and runs their product. The product
is larger than the set of distinct configurations when a dimension is conditional: a full fine-tuning trial
never asks for lora_r or lora_alpha, so points that differ only there train the same thing. `distinct`
says which points of the product to keep (the conditional dimensions of a point that does not use them sit
at their first value), so the sampler never trains one configuration twice.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Mapping

from finesweep.spaces.config import SweepConfig
from finesweep.spaces.space_config import FloatRange, SpaceConfig
from finesweep.spaces.space import LORA_DIMENSIONS, categorical_choices, float_ranges, unsuggested

# Each method's grid of learning rates, where the rate depends on the method (space.learning_rate per method).
MethodRates = dict[str, list[float]] | None
SIGNIFICANT_DIGITS = 4  # inner grid values as a person writes them (5.477e-05); the two ends stay exact


def range_values(dim: FloatRange, points: int) -> list[float]:
    """`points` values from low to high, both ends included, evenly spaced (in log space for a log range)."""
    if points < 2 or dim.low == dim.high:
        return [dim.low]
    if dim.log:
        lo, hi = math.log(dim.low), math.log(dim.high)
        raw = [math.exp(lo + (hi - lo) * i / (points - 1)) for i in range(points)]
    else:
        raw = [dim.low + (dim.high - dim.low) * i / (points - 1) for i in range(points)]
    inner = [min(dim.high, max(dim.low, float(f"{v:.{SIGNIFICANT_DIGITS}g}"))) for v in raw[1:-1]]
    return list(dict.fromkeys([dim.low, *inner, dim.high]))  # ordered, without repeats


def grid(space: SpaceConfig, models: list[str], precisions: list[str], points: int) -> dict[str, list[Any]]:
    """Every dimension `suggest` may ask for, with its grid values (the search space of Optuna's GridSampler).

    The LoRA dimensions are left out when no method uses them: a dimension that no trial asks for would only
    multiply the grid with copies."""
    values: dict[str, list[Any]] = categorical_choices(space, models, precisions)
    for name in LORA_DIMENSIONS:
        if name in values and all(name in unsuggested({"method": method}) for method in values["method"]):
            del values[name]
    values.update({name: range_values(dim, points) for name, dim in float_ranges(space).items()})
    if space.learning_rate_by_method:
        by_method = [_rate_values(space, method, points) for method in values["method"]]
        values["learning_rate"] = sorted({rate for rates in by_method for rate in rates})
    return values


def method_rates(space: SpaceConfig, values: Mapping[str, list[Any]], points: int) -> MethodRates:
    """Where the learning rate depends on the method, the grid's rates each method trains (`values` from `grid`):
    its own range's, or for a method whose rate is fixed the grid's first (it never asks for one, so the points that
    differ only there train the same thing). None where the rate does not depend on the method."""
    if not space.learning_rate_by_method:
        return None
    rates = {}
    for method in values["method"]:
        dim = space.float_dimension("learning_rate", method)
        rates[method] = range_values(dim, points) if isinstance(dim, FloatRange) else values["learning_rate"][:1]
    return rates


def _rate_values(space: SpaceConfig, method: str, points: int) -> list[float]:
    dim = space.float_dimension("learning_rate", method)
    return range_values(dim, points) if isinstance(dim, FloatRange) else [dim]


def distinct(point: Mapping[str, Any], values: Mapping[str, list[Any]], rates: MethodRates = None) -> bool:
    """Whether `point` (one combination of `values`) is the one kept among those that train the same thing, and
    (`rates`, from `method_rates`) trains a learning rate of its method's own grid."""
    if rates is not None and point["learning_rate"] not in rates[point["method"]]:
        return False
    return all(point[name] == values[name][0] for name in unsuggested(point) if name in values)


def grid_points(values: Mapping[str, list[Any]], rates: MethodRates = None) -> Iterator[dict[str, Any]]:
    """The distinct configurations of the grid, in product order."""
    names = list(values)
    for combination in itertools.product(*values.values()):
        point = dict(zip(names, combination))
        if distinct(point, values, rates):
            yield point


def grid_size(values: Mapping[str, list[Any]], rates: MethodRates = None) -> int:
    """How many distinct configurations the grid holds (what a full grid search trains)."""
    return sum(1 for _ in grid_points(values, rates))


def grid_trials(num_trials: int, size: int) -> tuple[int, str]:
    """How many trials a grid search of `size` configurations runs, and the note that tells the user why."""
    if size < num_trials:
        return size, (f"grid search: the grid holds {size} distinct configurations, fewer than search.num_trials "
                      f"({num_trials}): each runs once, {size} trials")
    if size > num_trials:
        return num_trials, (f"grid search: only {num_trials} of the grid's {size} configurations run (search.num_trials; "
                            f"a seeded random choice); set search.num_trials: {size} to run them all")
    return size, f"grid search: all {size} configurations of the grid run"


def grid_configurations(config: SweepConfig, precisions: list[str]) -> int:
    """How many distinct configurations the sweep's grid holds over the `precisions` the probe kept."""
    values = grid(config.space, config.model_names, precisions, config.search.grid_points)
    return grid_size(values, method_rates(config.space, values, config.search.grid_points))
