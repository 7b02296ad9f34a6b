"""The winner against the baseline (search.baseline: the recipe a user would run without finesweep), both measured
on the test split by the same code. Pure: measurements in, a comparison out."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

import numpy as np
from scipy.stats import bootstrap

from finesweep.search.selection.best import CONTINUATION_PREFIX, search_trial_name
from finesweep.search.selection.deploy import PRIMARY
from finesweep.search.selection.equal_samples import History, paired
from finesweep.spaces import Task
from finesweep.trainer.serving.evaluate import RowScores

# The quality metrics compared, per task (timings and sizes are the export's business, not the baseline's): a causal
# LM's scores of its greedy answers too, where the export generated (export.generation_samples).
QUALITY = {Task.classification: ("accuracy", "f1_macro", "loss"),
           Task.causal_lm: ("perplexity", "loss", "gen_rouge_l", "gen_token_f1", "gen_exact_match")}
ANSWERS_SCORE = "gen_rouge_l"  # the answers' score the sentences name
# The gain's interval: a paired bootstrap over the test rows (both models measured on the same rows), percentile
# method (BCa is undefined where the two models differ on no row). 2,000 resamples put the 95% bounds within 0.05
# points of where 100,000 do (two models 180 rows apart in 2,000, three seeds), in 0.14 s against 5.2 s.
CONFIDENCE = 0.95
RESAMPLES = 2000


def quality(metrics: dict[str, float], task: Task) -> dict[str, float]:
    return {name: metrics[name] for name in QUALITY[Task(task)] if name in metrics}


def compare(task: Task, winner: dict[str, float], baseline: dict[str, float], best: dict[str, Any],
            baseline_trial: dict[str, Any], untuned: dict[str, float] | None = None,
            rows: tuple[RowScores, RowScores] | None = None, seed: int = 0) -> dict[str, Any]:
    """What summary.json, the parent run, the card and the console say: both test scores, the gain in the task's
    primary metric (accuracy: points, + is better; perplexity: percent, - is better) and on validation, and whether
    the baseline itself won (then the export is the baseline's checkpoint: the search found nothing better).
    `untuned` (a causal LM): the base model's test scores before any training, the floor both started from.
    `baseline_trial["equal_samples"]` (equal_samples.Paired.as_dict), where the sweep paired the two trials: the
    winner's recipe against the baseline's at equal training samples, said beside a gain the longer training made.
    `rows` (the winner's and the baseline's RowScores on the test split, where they are different checkpoints): the
    gain's 95% interval (gain_interval, `seed`), said with the gain."""
    name, higher_is_better = PRIMARY[Task(task)]
    won = baseline_trial["trial_id"] == origin(best)
    gain = _gain(winner[name], baseline[name], higher_is_better)
    searched = baseline_trial.get("searched_trials")
    interval = gain_interval(task, *rows, seed) if rows else None
    test_rows = len(rows[0].values) if rows else None
    said = sentence(name, winner[name], baseline[name], gain, higher_is_better, won, origin(best) != best["trial_id"],
                    searched, interval, test_rows)
    pair = baseline_trial.get("equal_samples") if not won else None
    if not won and (trained := _samples(best)) > (reference := _samples(baseline_trial)) > 0:
        # Where the recipes were paired and the tuned one did not lead, the whole gain is the longer training.
        recipe_led = pair.get("tuned_leads", True) if pair else True  # summaries before the key: as they said
        said += (f"; the baseline trained on {reference:,} samples inside the sweep's budget, the tuned model on "
                 f"{trained:,}: {'part of the gain' if recipe_led else 'the gain'} is the longer training")
        if pair:
            said += (f" (the best validation {baseline_trial['metric']} within the first {pair['samples']:,} "
                     f"samples of each: {pair['tuned']:.4g} for the tuned recipe, {pair['baseline']:.4g} for the "
                     "baseline)")
    if won and (rate := (best.get("params") or {}).get("dropout")) != baseline_trial["params"].get("dropout"):
        said += (f"; trained further with the space's dropout {rate:g} (the baseline trial kept the checkpoint's, as a "
                 "user's run does)")
    if untuned and name in untuned:
        said += f"; the untuned base model: test {name} {untuned[name]:.4g}{_answers(untuned, winner)}"
    return {
        "trial_id": baseline_trial["trial_id"], "step": baseline_trial["step"], "params": baseline_trial["params"],
        "validation": {baseline_trial["metric"]: baseline_trial["value"]}, "test": quality(baseline, task),
        "winner_test": quality(winner, task), "metric": name, "gain": gain,
        "gain_unit": "points" if higher_is_better else "percent", "gain_interval": list(interval) if interval else None,
        "test_rows": test_rows, "validation_gain": best["value"] - baseline_trial["value"],
        "baseline_won": won, "sentence": said, "untuned_test": quality(untuned, task) if untuned else None,
        "equal_samples": pair, "searched_trials": searched,
    }


def _answers(untuned: dict[str, float], winner: dict[str, float]) -> str:
    """The untuned base model's greedy answers against the export's, where both answered the test prompts."""
    if ANSWERS_SCORE not in untuned or ANSWERS_SCORE not in winner:
        return ""
    return (f", the ROUGE-L of its greedy answers {untuned[ANSWERS_SCORE]:.3f} against the export's "
            f"{winner[ANSWERS_SCORE]:.3f}")


def paired_with(histories: list[History], best: dict[str, Any], baseline_trial: str | None,
                mode: str) -> dict[str, float] | None:
    """The trial the export descends from (origin(best)) against the baseline trial at equal training samples
    (equal_samples.paired), as summary.json keeps it: the recipe's own lead, apart from the longer training the rest of
    the budget gave the winner. None where no baseline ran, it is that trial, or either lacks evaluations there."""
    tuned = origin(best)
    if baseline_trial is None or tuned == baseline_trial:
        return None
    found = paired(histories, tuned, baseline_trial, mode)
    return found.as_dict() if found else None


def _samples(pick: dict[str, Any]) -> int:
    """Training samples behind a checkpoint: its step x its effective batch (0 when either is unknown)."""
    return int(pick.get("step") or 0) * int((pick.get("params") or {}).get("effective_batch_size") or 0)


def origin(best: dict[str, Any]) -> str:
    """The search trial the export descends from: the winner's, or, where the export is a checkpoint of the rest of the
    budget's training (best["exploitation"], search.exploit, when it `continued`), the trial it went on from. A
    continuation that improved on nothing leaves the search's winner as the export, which may be another trial than
    its source (the model compared at equal samples, search/selection/equal_samples.py). Where the runner-up model
    trained on with the time the first continuation left (`second_leg`) and is exported, the trial it went on from."""
    exploitation = best.get("exploitation") or {}
    for leg in (exploitation.get("second_leg") or {}, exploitation):
        if leg.get("continued") and leg.get("final_trial", best["trial_id"]) == best["trial_id"]:
            return leg["source_trial"]
    return best["trial_id"]


def export_name(best: dict[str, Any]) -> str:
    """The exported trial as the leaderboard and MLflow name it: the continuation (by the trial it went on from)
    where the export is one of its checkpoints, else the search trial."""
    source = origin(best)
    return f"{CONTINUATION_PREFIX}{source}" if source != best["trial_id"] else search_trial_name(source)


def _gain(winner: float, baseline: float, higher_is_better: bool) -> float:
    """Accuracy-like metrics: the difference in points (0.781 against 0.766: +1.5); perplexity: the relative change
    in percent (9.0 against 10.0: -10.0)."""
    if higher_is_better:
        return round(100 * (winner - baseline), 2)
    return round(100 * (winner - baseline) / baseline, 2) if baseline and math.isfinite(baseline) else math.nan


def gain_interval(task: Task, winner: RowScores, baseline: RowScores, seed: int = 0) -> tuple[float, float] | None:
    """The CONFIDENCE interval of the primary metric's gain (_gain's units), from a paired bootstrap over the test rows:
    how far the gain could move on another draw of as many rows, the two models kept on the same rows. A test split of
    2,000 tweets moves accuracy by about a point either way, so a gain of one point there may be luck; of 30 rows, by
    ten. None with fewer than two rows (nothing to resample)."""
    if len(winner.values) < 2 or len(winner.values) != len(baseline.values):
        return None
    higher_is_better = PRIMARY[Task(task)][1]

    def resampled_gain(winner_values, winner_weights, baseline_values, baseline_weights, axis=-1):
        tuned = winner_values.sum(axis) / winner_weights.sum(axis)
        base = baseline_values.sum(axis) / baseline_weights.sum(axis)
        if higher_is_better:  # accuracy: points
            return 100 * (tuned - base)
        return 100 * np.expm1(tuned - base)  # perplexity = exp(mean token loss): percent, - is better

    data = (winner.values, winner.weights, baseline.values, baseline.weights)
    found = bootstrap(data, resampled_gain, paired=True, vectorized=True, n_resamples=RESAMPLES, batch=200,
                      confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(seed))
    low, high = found.confidence_interval
    return round(float(low), 2), round(float(high), 2)


def sentence(name: str, winner: float, baseline: float, gain: float, higher_is_better: bool, won: bool,
             continued: bool = False, searched: int | None = None, interval: tuple[float, float] | None = None,
             test_rows: int | None = None) -> str:
    """`searched`: the space's trials (the baseline aside) that reported an evaluation; 0: the budget paid for the
    baseline alone, and "found nothing better" would claim a search that did not happen (None: not counted).
    `interval` (gain_interval) over `test_rows`: said with the gain, and a gain whose interval holds 0 is not called
    better or worse."""
    unit = "points" if higher_is_better else "%"
    spread = (f"; {CONFIDENCE:.0%} interval {interval[0]:+.2f} to {interval[1]:+.2f} over {test_rows:,} test rows"
              if interval else "")
    why = ("the budget paid for the baseline trial alone (no trial of the space reached an evaluation: nothing was "
           "compared)" if searched == 0 else
           "the baseline recipe was the best on validation: the search found nothing better in its budget")
    if won and continued:  # the recipe itself, trained longer: what the budget bought, not what the search found
        return (f"{why}, so the export is the baseline recipe trained further with the rest of the budget (test "
                f"{name} {winner:.4g} against {baseline:.4g} at its checkpoint from the search, {gain:+.2f} {unit}"
                f"{spread})")
    if won:
        return f"{why}, so the export is the baseline's checkpoint (test {name} {winner:.4g})"
    better = gain > 0 if higher_is_better else gain < 0
    verdict = f"is {'better than' if better else ('the same as' if gain == 0 else 'worse than')} the baseline recipe"
    if interval and gain != 0 and interval[0] <= 0 <= interval[1]:
        verdict = (f"scored {'above' if better else 'below'} the baseline recipe by less than the test split can tell "
                   "apart (the interval holds 0: more test rows would tell)")
    return (f"tuned vs baseline: test {name} {winner:.4g} against {baseline:.4g} ({gain:+.2f} {unit}{spread}): the "
            f"tuned model {verdict}")


def majority_class_warnings(full: dict[str, float], labels: Iterable[int], names: list[str] | None) -> list[str]:
    """A classifier's paragraph where its test accuracy (in `full`, the full model's test metrics) is no better than
    answering the test split's most frequent class every time: a model that learned nothing from the texts scores
    about that share, and its gain over a baseline trained as badly says nothing. Empty where it beats that share, and
    for a causal LM (no accuracy: its labels are token ids)."""
    if "accuracy" not in full or not (labels := list(labels)):
        return []
    label, count = Counter(labels).most_common(1)[0]
    share, accuracy = count / len(labels), full["accuracy"]
    if accuracy > share:
        return []
    name = names[label] if names and 0 <= label < len(names) else str(label)
    return [f"test accuracy {accuracy:.4f} is no better than always answering the test split's most frequent class "
            f"'{name}' ({share:.4f} of its {len(labels):,} rows): the model did not learn to tell the classes apart "
            "from the texts. Check that data.label_column holds each text's class (not an id, a score or a shuffled "
            "column) and data.text_column the text that decides it; with few rows per class (the data report counts "
            "them), more rows or a longer time budget."]
