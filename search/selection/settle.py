"""Which evaluation of the winner's lineage the export takes: the search's winner or its continuation's, where the
continuation starts (the winning trial's latest kept checkpoint), and when a validation score's lead is noise. Tune's
results and picks in, a pick out; the only files read are the checkpoints' row scores. No Ray, MLflow or torch."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

from finesweep.search.selection.best import Best, kept_checkpoints, pick_best
from finesweep.trainer.row_scores import RowScores


def latest_checkpoint(winner: Best, results) -> Best:
    """Where the continuation starts: the winning trial's most trained checkpoint (Tune always keeps its latest),
    not the step of its best evaluation. Steps after the best one are training paid for; a best picked on a noisy
    validation split is often an earlier step of the same plateau (0.797 at step 660, 0.795 at 990), and the export
    keeps the winner's best checkpoint as a candidate whatever the continuation does."""
    kept = [(checkpoint, metrics) for result in results for checkpoint, metrics in kept_checkpoints(result)
            if metrics.get("trial_id") == winner.trial_id and math.isfinite(float(metrics.get(winner.metric, math.nan)))]
    if not kept:
        return winner
    checkpoint, metrics = max(kept, key=lambda item: int(item[1].get("step", 0)))
    if int(metrics.get("step", 0)) <= winner.step:
        return winner
    return dataclasses.replace(winner, step=int(metrics["step"]), value=float(metrics[winner.metric]),
                               checkpoint_dir=Path(checkpoint.path))


def settled(pick: Best | None, continued, mode: str, validation_rows: int) -> Best | None:
    """The export's checkpoint of the winner's lineage: the continuation's latest evaluation (trained longest, its
    rate decayed to zero) unless `pick`, an earlier one, is better by more than the validation split's noise (one
    standard error of an accuracy-like metric on `validation_rows` rows; none known for a loss). A first evaluation a
    hair above the last is noise: on the tweets the continuation's first checkpoints (validation 0.796, 0.791) scored
    0.767 and 0.770 on test, its last ones (0.784, 0.789) 0.7875 and 0.780 (benchmarks/README.md)."""
    own = pick_best(continued, pick.metric, mode) if pick is not None else None
    if own is None:
        return pick
    latest = latest_checkpoint(own, continued)  # the continuation's most trained kept checkpoint (Tune keeps it)
    if (latest.trial_id, latest.step) == (pick.trial_id, pick.step):
        return pick
    shortfall = pick.value - latest.value if mode == "max" else latest.value - pick.value
    return latest if shortfall <= standard_error(pick.value, validation_rows, mode) else pick


def tied_leader(pick: Best, results, mode: str, validation_rows: int) -> tuple[Best, float] | None:
    """The lucky-winner guard: the best evaluation of another trial, and the noise of the two scores' difference,
    where `pick`'s lead over it is smaller than that noise: the validation split cannot tell the two configurations
    apart, and which one the rest of the budget trains would be a coin's toss. The noise is the paired one where both
    checkpoints hold their rows' scores (paired_noise), else, for an accuracy-like metric, their binomial standard
    errors' root sum of squares on `validation_rows` rows. None where the lead is larger, or no noise is known."""
    other = pick_best([r for r in results if (r.metrics or {}).get("trial_id") != pick.trial_id], pick.metric, mode)
    if other is None:
        return None
    noise = paired_noise(pick, other)
    if noise is None:
        noise = math.hypot(standard_error(pick.value, validation_rows, mode),
                           standard_error(other.value, validation_rows, mode))
    return (other, noise) if abs(pick.value - other.value) < noise else None


# The metrics paired_noise reads from the rows' scores, and the row score behind each.
ROW_METRICS = {"eval_loss": "loss", "eval_perplexity": "loss", "eval_accuracy": "correct"}


def paired_noise(first: Best, second: Best) -> float | None:
    """One standard error of the difference between two evaluations' scores, from their checkpoints' row scores
    (trainer/row_scores.py): the spread of the row-by-row differences over the square root of the rows. Both scored
    the same validation rows, so what the rows share (a hard conversation is hard for both) cancels, and a tie is
    told apart from a lead that two independent errors would hide. A perplexity's is its loss's, times the two
    perplexities' geometric mean (d perplexity = perplexity x d loss). None where either holds none, or they
    scored different rows."""
    kind = ROW_METRICS.get(first.metric)
    scores = [RowScores.load(best.checkpoint_dir) for best in (first, second)]
    if kind is None or None in scores:
        return None
    a, b = (getattr(score, kind) for score in scores)
    differences = [x - y for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    if len(a) != len(b) or len(differences) < 2:
        return None
    error = statistics.stdev(differences) / math.sqrt(len(differences))
    return error * math.sqrt(first.value * second.value) if first.metric == "eval_perplexity" else error


def standard_error(value: float, rows: int, mode: str) -> float:
    """One standard error of an accuracy-like metric (maximised, between 0 and 1) measured on `rows` rows; 0 for
    anything else (a loss, a perplexity: no noise model here)."""
    if mode != "max" or rows < 1 or not 0 <= value <= 1:
        return 0.0
    return math.sqrt(value * (1 - value) / rows)


def better(first: Best | None, second: Best | None, mode: str) -> Best | None:
    """The better of two picks by their metric (the first on a tie: the search's winner over its continuation)."""
    if second is None or not math.isfinite(second.value):
        return first
    if first is None:
        return second
    improves = second.value > first.value if mode == "max" else second.value < first.value
    return second if improves else first
