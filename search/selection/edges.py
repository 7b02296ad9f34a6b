"""A winner on the edge of the space: the best may lie beyond what was searched. Pure: the winner's hyperparameters,
the space and the hyperparameters of the trials the search compared in, one sentence per edge out, each naming the
field to widen."""

from __future__ import annotations

import math
from typing import Any

from finesweep.spaces.space_config import FloatRange, SpaceConfig
from finesweep.spaces.space import float_ranges

# How close to an end of a searched range (as a fraction of the range, in log scale for a log range) counts as on it.
EDGE_FRACTION = 0.05
# A range widened past an edge: by this factor in log scale (lr 3e-4 -> 6e-4), by this fraction of its width otherwise.
WIDEN_FACTOR = 2.0


def edge_warnings(params: dict[str, Any], space: SpaceConfig, compared: list[dict[str, Any]]) -> list[str]:
    """One sentence per searched dimension whose winning value sits at an end of the space (within EDGE_FRACTION of
    a range's end, or the smallest or largest of two or more batch sizes), with the fix. Only a dimension of which
    the search's trials (`compared`: each one's hyperparameters, the baseline's left out) tried two or more values
    counts: there the winner beat another value and the trend points past the end. A value no other trial varied
    (the space's centre alone in a short budget: batch 8 of [8, 16]) says nothing about what lies beyond it."""
    method = params.get("method")
    ranges = float_ranges(space, method)
    # A learning rate per method (space.learning_rate by method) is an edge of the winner's method's own range, which
    # only the trials of that method vary.
    by_method = space.learning_rate_by_method
    alike = [trial for trial in compared if trial.get("method") == method] if by_method else compared
    varied = {name for name in (*ranges, "effective_batch_size")
              if len({trial.get(name) for trial in (alike if name == "learning_rate" else compared)}) > 1}
    warnings = [_range_edge(_field(space, name, method), name, float(params[name]), dim)
                for name, dim in ranges.items() if name in params and name in varied]
    batches = sorted(space.effective_batch_size)
    batch = params.get("effective_batch_size")
    if "effective_batch_size" in varied and len(batches) > 1 and batch in (batches[0], batches[-1]):
        end, other = ("largest", batches[-1] * 2) if batch == batches[-1] else ("smallest", max(1, batches[0] // 2))
        warnings.append(f"the winner's effective_batch_size {batch} is the {end} in space.effective_batch_size "
                        f"{batches}: the best may lie beyond it; add {other} to space.effective_batch_size")
    return [w for w in warnings if w]


def _field(space: SpaceConfig, name: str, method: str | None) -> str:
    """The sweep file's field that holds the winner's range of `name`: space.learning_rate.<method> per method."""
    per_method = name == "learning_rate" and space.learning_rate_by_method and method
    return f"space.{name}.{method}" if per_method else f"space.{name}"


def _range_edge(field: str, name: str, value: float, dim: FloatRange) -> str:
    position = _position(value, dim)
    if EDGE_FRACTION < position < 1 - EDGE_FRACTION:
        return ""
    top = position >= 1 - EDGE_FRACTION
    if not top and not dim.log and dim.low <= 0:
        return ""  # no warm-up or weight decay at all: there is nothing below it to search
    end = f"{field}.{'high' if top else 'low'}"
    return (f"the winner's {name} {value:.3g} lies at the {'top' if top else 'bottom'} of {field} "
            f"[{dim.low:g}, {dim.high:g}]: the best may lie beyond it; widen {end} (to {_widened(dim, top):.3g}, say)")


def _position(value: float, dim: FloatRange) -> float:
    """Where `value` lies in the range, 0 at low and 1 at high (in log scale for a log range)."""
    if dim.high == dim.low:
        return 0.5
    if dim.log:
        return (math.log(value) - math.log(dim.low)) / (math.log(dim.high) - math.log(dim.low))
    return (value - dim.low) / (dim.high - dim.low)


def _widened(dim: FloatRange, top: bool) -> float:
    if dim.log:
        return dim.high * WIDEN_FACTOR if top else dim.low / WIDEN_FACTOR
    width = dim.high - dim.low
    return dim.high + width / WIDEN_FACTOR if top else max(0.0, dim.low - width / WIDEN_FACTOR)
