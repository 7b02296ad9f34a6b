"""Trials compared at equal training: which model the rest of a time budget trains, and what the search found.

Trials of models of different speeds are judged by the search at equal seconds, where the faster model has seen
more data and leads early; the continuation then trains the winner several times longer, where a model that learns
more per sample overtakes. On the tweets a 3-layer MiniLM led a 6-layer one at 95 s of trials (validation 0.694 after
3,424 samples against 0.677 after 1,264), was trained on for 196 s and ended 2.3 points under one epoch of the 6-layer
model's defaults; at equal samples the 6-layer led (0.677 at 1,264 against 0.573 at 1,712). So models are compared at
equal samples (`choose_model`); recipes of one model keep the search's comparison (equal seconds, the best
evaluation). The winner's trial against the baseline's trial at equal training (`paired`) is the recipe effect: what
the search found, apart from the longer training the rest of the budget gave the winner. Pure: evaluation histories
in, a choice and its reason out.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from finesweep.search.selection.best import best_of, betters


@dataclass(frozen=True)
class History:
    """One trial's evaluations: (training samples seen, metric value), in the order reported, and each one's seconds
    since the trial started (Tune's time_total_s; empty where unknown)."""

    trial_id: str
    model: str
    evaluations: tuple[tuple[int, float], ...]
    seconds: tuple[float, ...] = ()

    @property
    def reach(self) -> int:
        return max((samples for samples, _ in self.evaluations), default=0)


@dataclass(frozen=True)
class ModelChoice:
    """The model with the best evaluation at `samples` training samples (the fewest that every model's furthest
    trial reached), each model's value there, and whether it differs from the best evaluation's model."""

    model: str
    samples: int
    values: dict[str, float]
    changed: bool

    def sentence(self, metric: str, searched_best: str) -> str:
        ranked = ", ".join(f"{model} {value:.4g}" for model, value in self.values.items())
        outcome = (f"{self.model} is trained further, not {searched_best}, whose lead was seen on more data"
                   if self.changed else f"{self.model} leads there too")
        return f"models compared at equal training samples ({self.samples:,}: {metric} {ranked}): {outcome}"


def choose_model(histories: list[History], searched_best: str, mode: str) -> ModelChoice | None:
    """The model to train further, or None when fewer than two models reported a finite evaluation. Each model's
    value is its best evaluation over at most the common samples; a model whose first evaluation came later than
    that counts its first (it saw more data: the comparison leans its way, as the search's did)."""
    finite = [History(h.trial_id, h.model, tuple((s, v) for s, v in h.evaluations if math.isfinite(v)))
              for h in histories]
    by_model: dict[str, list[History]] = {}
    for history in finite:
        if history.evaluations:
            by_model.setdefault(history.model, []).append(history)
    if len(by_model) < 2:
        return None
    samples = min(max(h.reach for h in trials) for trials in by_model.values())
    values = {model: _value_within(trials, samples, mode) for model, trials in by_model.items()}
    ordered = dict(sorted(values.items(), key=lambda item: -item[1] if mode == "max" else item[1]))
    model = next(iter(ordered))
    if ordered[model] == values.get(searched_best):
        model = searched_best  # a tie keeps the search's pick
    return ModelChoice(model, samples, ordered, model != searched_best)


# Two recipes whose training speeds differ by more than this share are compared at equal seconds, not samples.
SPEED_TOLERANCE = 0.10


@dataclass(frozen=True)
class Paired:
    """The winning recipe against the baseline's at equal training: each one's best evaluation within the first `at`
    training samples (footing "samples") or seconds (footing "seconds") of each, the fewer of their furthest; with the
    samples and seconds at which each was picked. The recipe effect: what the search found, before the winner
    trained longer than the baseline could."""

    footing: str
    at: float
    tuned: float
    baseline: float
    tuned_leads: bool  # strictly better for the search's mode: a tie says the recipe bought nothing there
    tuned_samples: int
    baseline_samples: int
    tuned_seconds: float | None
    baseline_seconds: float | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def footing(tuned: History, baseline: History) -> str:
    """"seconds" where both trials' training speeds are known and differ by more than SPEED_TOLERANCE (a faster
    precision, frozen weights, a larger batch: the speed is part of the recipe, and what a user has is time);
    "samples" otherwise (the same comparison, unmoved by what else ran on the machine)."""
    speeds = [_speed(history) for history in (tuned, baseline)]
    if None in speeds:
        return "samples"
    return "seconds" if abs(speeds[0] / speeds[1] - 1) > SPEED_TOLERANCE else "samples"


def _speed(history: History) -> float | None:
    """Samples per second at the trial's last evaluation (None: its seconds unknown)."""
    if len(history.seconds) != len(history.evaluations) or not history.seconds or history.seconds[-1] <= 0:
        return None
    return history.evaluations[-1][0] / history.seconds[-1]


def paired(histories: list[History], tuned_trial: str, baseline_trial: str, mode: str) -> Paired | None:
    """The tuned trial against the baseline trial at equal training (footing; the other axis where that one has no
    pair: a baseline that evaluated once, after the tuned trial's last evaluation in seconds, still has one in
    samples), or None where either has no finite evaluation within the samples or seconds both reached: a first
    evaluation past them would lean the comparison its way."""
    found = {h.trial_id: h for h in histories}
    if tuned_trial not in found or baseline_trial not in found:
        return None
    preferred = footing(found[tuned_trial], found[baseline_trial])
    for basis in (preferred, "samples" if preferred == "seconds" else None):
        if basis and (pair := _paired_on(found[tuned_trial], found[baseline_trial], basis, mode)):
            return pair
    return None


def _paired_on(tuned_history: History, baseline_history: History, basis: str, mode: str) -> Paired | None:
    points = [_points(history, basis) for history in (tuned_history, baseline_history)]
    if not all(points):
        return None
    at = min(max(axis for axis, *_ in trial) for trial in points)
    within = [[point for point in trial if point[0] <= at] for trial in points]
    if not all(within):
        return None
    tuned, baseline = (_best_point(trial, mode) for trial in within)
    return Paired(basis, at, tuned[3], baseline[3], betters(tuned[3], baseline[3], mode), tuned[1], baseline[1],
                  tuned[2], baseline[2])


def _points(history: History, basis: str) -> list[tuple[float, int, float | None, float]]:
    """(axis, samples, seconds, value) of each finite evaluation, the axis being samples or seconds."""
    known = len(history.seconds) == len(history.evaluations)
    seconds = history.seconds if known else (None,) * len(history.evaluations)
    return [(samples if basis == "samples" else second, samples, second, value)
            for (samples, value), second in zip(history.evaluations, seconds) if math.isfinite(value)]


def _best_point(points: list[tuple[float, int, float | None, float]], mode: str):
    """The point with the best value (the earliest of equal ones)."""
    value = best_of([point[3] for point in points], mode)
    return next(point for point in points if point[3] == value)


def _value_within(trials: list[History], samples: int, mode: str) -> float:
    within = [value for trial in trials for seen, value in trial.evaluations if seen <= samples]
    if within:
        return best_of(within, mode)
    return best_of([min(trial.evaluations)[1] for trial in trials], mode)  # each trial's first evaluation
