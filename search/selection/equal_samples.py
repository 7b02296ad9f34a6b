"""Which model the rest of a time budget trains: models compared at equal training samples, not equal seconds.

Trials of models of different speeds are judged by the search at equal seconds, where the faster model has seen
more data and leads early; the continuation then trains the winner several times longer, where a model that learns
more per sample overtakes. On the tweets (benchmarks/README.md, eleventh session), a 3-layer MiniLM led a 6-layer
one at 95 s of trials (validation 0.694 after 3,424 samples against 0.677 after 1,264), was trained on for 196 s
and ended 2.3 points under one epoch of the 6-layer model's defaults; at equal samples the 6-layer led (0.677 at
1,264 against 0.573 at 1,712). Recipes of one model keep the search's comparison (equal seconds, the best
evaluation). The same pairing tells how much of a winner's lead over the baseline trial is its recipe's, not the
longer training the rest of the budget gave it (`paired`). Pure: evaluation histories in, a choice and its reason out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from finesweep.search.selection.best import best_of, betters


@dataclass(frozen=True)
class History:
    """One trial's evaluations: (training samples seen, metric value), in the order reported."""

    trial_id: str
    model: str
    evaluations: tuple[tuple[int, float], ...]

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


@dataclass(frozen=True)
class Paired:
    """Two trials' best evaluations within the first `samples` training samples of each (the fewer of their
    furthest): the winning recipe against the baseline's, before the winner trained longer than the baseline could."""

    samples: int
    tuned: float
    baseline: float
    tuned_leads: bool  # strictly better for the search's mode: a tie says the recipe bought nothing there

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "tuned": self.tuned, "baseline": self.baseline,
                "tuned_leads": self.tuned_leads}


def paired(histories: list[History], tuned_trial: str, baseline_trial: str, mode: str) -> Paired | None:
    """The tuned trial against the baseline trial at equal training samples, or None where either has no finite
    evaluation within the samples both reached (a first evaluation past them would lean the comparison its way)."""
    finite = {h.trial_id: [(s, v) for s, v in h.evaluations if math.isfinite(v)] for h in histories}
    tuned, baseline = finite.get(tuned_trial), finite.get(baseline_trial)
    if not tuned or not baseline:
        return None
    samples = min(max(s for s, _ in tuned), max(s for s, _ in baseline))
    within = [[v for s, v in evaluations if s <= samples] for evaluations in (tuned, baseline)]
    if not all(within):
        return None
    tuned_best, baseline_best = best_of(within[0], mode), best_of(within[1], mode)
    return Paired(samples, tuned_best, baseline_best, betters(tuned_best, baseline_best, mode))


def _value_within(trials: list[History], samples: int, mode: str) -> float:
    within = [value for trial in trials for seen, value in trial.evaluations if seen <= samples]
    if within:
        return best_of(within, mode)
    return best_of([min(trial.evaluations)[1] for trial in trials], mode)  # each trial's first evaluation
