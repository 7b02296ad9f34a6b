"""Speed against quality: each trial's best metric and its training throughput, the Pareto front over them, and
the stated rule (search.pick) that names the trial whose best checkpoint is exported.

Throughput, not cost per trial, is the second objective: a trial's cost depends on how long ASHA let it run, so an
early-stopped trial would look cheap whatever its configuration; throughput is a property of the configuration
itself (model, precision, method, micro-batch) and what a user pays per unit of data in the end.

Pure functions over Tune results or plain points; outputs/pareto_report.py prints, logs and tags what they decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from finesweep.search.selection.best import BEST_SO_FAR, Best, pick_best
from finesweep.spaces.search_config import THROUGHPUT_METRIC

if TYPE_CHECKING:
    from finesweep.spaces.config import SearchConfig

# The trial's own throughput, as each evaluation reports it (trainer/trial.py): training samples per second of wall
# time since the Trainer began (or resumed), evaluations and saves included; model loading and imports are not in
# it. The last report covers the whole trial, and it is the result Tune hands to Optuna. Samples, not tokens:
# between candidates with different tokenizers, tokens/s would favour the chattier tokenizer.
THROUGHPUT = THROUGHPUT_METRIC
SECOND_OBJECTIVES = {"throughput": (THROUGHPUT, "max")}  # search.second_objective -> (result key, mode)
# `within` forgives the round-off of the subtraction (0.9 - 0.89 is 0.010000000000000009), nothing more.
ROUND_OFF = 1e-9


def search_objectives(search: "SearchConfig") -> tuple[str | list[str], str | list[str]]:
    """OptunaSearch's metric and mode: the metric alone, or [metric, second] with their modes (multi-objective).
    The metric is each trial's best evaluation so far (BEST_SO_FAR): Optuna is told a trial's last result, and a
    trial is worth its best checkpoint, which the export picks from, not its last evaluation."""
    if search.second_objective == "none":
        return BEST_SO_FAR, search.mode
    key, mode = SECOND_OBJECTIVES[search.second_objective]
    return [BEST_SO_FAR, key], [search.mode, mode]


@dataclass(frozen=True)
class TrialPoint:
    """One trial on the speed/quality plane: its best evaluation (and checkpoint) and its throughput."""

    best: Best
    throughput: float

    @property
    def trial_id(self) -> str:
        return self.best.trial_id

    @property
    def value(self) -> float:
        return self.best.value


def trial_points(results, metric: str, mode: str) -> list[TrialPoint]:
    """Each trial with a finite best `metric` and a finite throughput, in the results' order. The best is over
    the trial's kept checkpoints, which always hold its best evaluation (ties to the earlier step, as pick_best);
    the throughput is its last report's."""
    points = []
    for result in results:
        best = pick_best([result], metric, mode)
        throughput = (getattr(result, "metrics", None) or {}).get(THROUGHPUT)
        if best is not None and isinstance(throughput, (int, float)) and math.isfinite(throughput):
            points.append(TrialPoint(best, float(throughput)))
    return points


def _oriented(value: float, mode: str) -> float:
    """Higher is better, whatever the mode."""
    return value if mode == "max" else -value


def dominates(a: TrialPoint, b: TrialPoint, mode: str) -> bool:
    """a is at least as good as b on both objectives and better on one."""
    qa, qb = _oriented(a.value, mode), _oriented(b.value, mode)
    return qa >= qb and a.throughput >= b.throughput and (qa > qb or a.throughput > b.throughput)


def pareto_front(points: list[TrialPoint], mode: str) -> list[TrialPoint]:
    """The trials no other trial dominates, fastest first (two identical points are both on the front)."""
    front = [p for p in points if not any(dominates(q, p, mode) for q in points)]
    return sorted(front, key=lambda p: (-p.throughput, -_oriented(p.value, mode)))


def within(value: float, best: float, tolerance: float, mode: str) -> bool:
    """`value` falls short of `best` by at most `tolerance` (absolute, inclusive)."""
    shortfall = _oriented(best, mode) - _oriented(value, mode)
    return shortfall <= tolerance + ROUND_OFF * max(1.0, abs(best))


def pick_point(points: list[TrialPoint], mode: str, rule: str, tolerance: float) -> TrialPoint | None:
    """The trial `rule` names. best_metric: the best value, ties to the earlier step, then to the earlier trial
    (pick_best's choice). fastest_within: of the trials within `tolerance` of the best value, the fastest; ties to
    the better value, then the earlier step. None without points."""
    if not points:
        return None
    best = min(points, key=lambda p: (-_oriented(p.value, mode), p.best.step))
    if rule == "best_metric":
        return best
    if rule != "fastest_within":
        raise ValueError(f"unknown pick rule {rule!r}; the rules are best_metric and fastest_within")
    eligible = [p for p in points if within(p.value, best.value, tolerance, mode)]
    return min(eligible, key=lambda p: (-p.throughput, -_oriented(p.value, mode), p.best.step))


def rule_text(search: "SearchConfig") -> str:
    """The rule in words, for the console and the parent run's tag."""
    if search.pick == "fastest_within":
        return (f"fastest_within: the fastest trial ({THROUGHPUT}) whose best {search.metric} is within "
                f"{search.pick_tolerance:g} of the best")
    return f"best_metric: the best {search.metric} ({search.mode}) over all evaluations"


def pareto_report(points: list[TrialPoint], front: list[TrialPoint], chosen: TrialPoint | None,
                  search: "SearchConfig") -> dict[str, Any]:
    """What pareto.json holds: every trial's point (front first, fastest first), the front and the pick."""
    on_front = {p.trial_id for p in front}
    ordered = front + sorted((p for p in points if p.trial_id not in on_front), key=lambda p: -p.throughput)

    def row(p: TrialPoint) -> dict[str, Any]:
        return {"trial_id": p.trial_id, search.metric: p.value, "step": p.best.step, THROUGHPUT: p.throughput,
                "on_front": p.trial_id in on_front, "mlflow_run_id": p.best.mlflow_run_id, "params": p.best.params}

    return {"metric": search.metric, "mode": search.mode, "second_objective": search.second_objective,
            "second_metric": THROUGHPUT, "second_mode": "max", "rule": search.pick,
            "tolerance": search.pick_tolerance if search.pick == "fastest_within" else None,
            "rule_text": rule_text(search), "points": [row(p) for p in ordered],
            "front": [p.trial_id for p in front], "pick": row(chosen) if chosen else None}
