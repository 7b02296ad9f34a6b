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
            rows: tuple[RowScores, RowScores] | None = None, seed: int = 0,
            floor: dict[str, float] | None = None) -> dict[str, Any]:
    """What summary.json, the parent run, the card and the console say of the export against the baseline recipe,
    as two effects never summed into one verdict:

    - the recipe effect (what the search found): the winner's trial against the baseline's trial at equal training
      on validation (`baseline_trial["recipe_effect"]`, equal_samples.Paired.as_dict);
    - the training effect (what the rest of the budget bought): the winner's recipe from that point to the export;

    and the test split's scores of both, with the samples and seconds behind each (`baseline_trial["arms"]`). Only an
    equal-time baseline (`baseline_trial["equal_time"]`, search.baseline.budget: equal) makes their difference a
    gain; any other difference is labelled as one between arms trained unequally. `winner`/`baseline`: the test
    metrics of the export and of the baseline checkpoint scored; `untuned` (a causal LM): the base model's before any
    training; `floor` (a classifier): what always answering the test split's most frequent class scores; `rows`: both
    models' RowScores on the test split, for the difference's interval (`seed`)."""
    name, higher_is_better = PRIMARY[Task(task)]
    footing = _footing(baseline_trial, best)
    difference = _gain(winner[name], baseline[name], higher_is_better)
    interval = gain_interval(task, *rows, seed) if rows else None
    test_rows = len(rows[0].values) if rows else None
    won = origin(best) == baseline_trial["trial_id"]
    recipe = None if won else recipe_effect(baseline_trial)  # the export is the baseline recipe: nothing to pair
    training = training_effect(best, baseline_trial.get("arms") or {}, recipe)
    test = {"name": name, "winner": winner[name], "baseline": baseline[name], "difference": difference,
            "higher_is_better": higher_is_better, "interval": interval, "test_rows": test_rows}
    said = [_recipe_sentence(baseline_trial, best, recipe), _training_sentence(training, baseline_trial["metric"]),
            _test_sentence(footing, test, baseline_trial, won), _floor_sentence(name, untuned, floor, winner)]
    equal = footing == EQUAL_TIME
    return {
        "trial_id": baseline_trial["trial_id"], "step": baseline_trial["step"], "params": baseline_trial["params"],
        "validation": {baseline_trial["metric"]: baseline_trial["value"]}, "test": quality(baseline, task),
        "winner_test": quality(winner, task), "metric": name, "footing": footing,
        "unit": "points" if higher_is_better else "percent", "difference": difference,
        "difference_interval": list(interval) if interval else None, "test_rows": test_rows,
        "gain": difference if equal else None, "gain_interval": list(interval) if equal and interval else None,
        "arms": baseline_trial.get("arms"), "recipe_effect": recipe, "training_effect": training,
        "equal_time": baseline_trial.get("equal_time"), "baseline_won": won,
        "searched_trials": baseline_trial.get("searched_trials"),
        "untuned_test": quality(untuned, task) if untuned else None, "floor": floor,
        "sentences": [line for line in said if line], "sentence": " ".join(line for line in said if line),
    }


# How the test split's two scores stand to each other.
SAME_CHECKPOINT, EQUAL_TIME, UNEQUAL = "same_checkpoint", "equal_time", "unequal"


def _footing(baseline_trial: dict[str, Any], best: dict[str, Any]) -> str:
    """same_checkpoint: the export is the baseline trial's checkpoint; equal_time: the baseline scored is the recipe
    trained again for the export's seconds; unequal: the baseline trial's checkpoint, trained for a trial's share."""
    if (baseline_trial.get("equal_time") or {}).get("checkpoint"):
        return EQUAL_TIME
    if baseline_trial["trial_id"] == best["trial_id"] and int(baseline_trial["step"]) == int(best["step"]):
        return SAME_CHECKPOINT
    return UNEQUAL


def scored_checkpoint(baseline_trial: dict[str, Any]) -> dict[str, Any]:
    """The baseline checkpoint the test split scores: the equal-time run's where it evaluated, else the trial's."""
    return (baseline_trial.get("equal_time") or {}).get("checkpoint") or baseline_trial


def recipe_effect(baseline_trial: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's pairing of the two trials on validation, with the difference in the search metric's units and, for
    an accuracy, its approximate interval over the validation rows; None where the trials were not paired."""
    paired = baseline_trial.get("recipe_effect")
    if not paired:
        return None
    share = _is_share(baseline_trial["metric"])
    rows = baseline_trial.get("validation_rows") or 0
    return {**paired, "difference": _gain(paired["tuned"], paired["baseline"], share),
            "unit": "points" if share else "percent", "validation_rows": rows,
            "interval": _share_interval(paired["tuned"], paired["baseline"], rows) if share else None}


def training_effect(best: dict[str, Any], arms: dict[str, Any], recipe: dict[str, Any] | None) -> dict[str, Any] | None:
    """The winner's recipe from where the recipe effect was measured to the export, on validation: what the rest of
    the budget bought. None where the recipes were not paired or the export was trained no further than that."""
    export = arms.get("export")
    if not recipe or not export or export["samples"] <= recipe["tuned_samples"]:
        return None
    share = recipe["unit"] == "points"
    return {"from": recipe["tuned"], "to": best["value"], "from_samples": recipe["tuned_samples"],
            "from_seconds": recipe["tuned_seconds"], "to_samples": export["samples"], "to_seconds": export["seconds"],
            "difference": _gain(best["value"], recipe["tuned"], share), "unit": recipe["unit"]}


def _is_share(metric: str) -> bool:
    """A metric between 0 and 1, compared in points (accuracy, F1); any other (a loss) in percent."""
    return metric.removeprefix("eval_") in ("accuracy", "f1_macro")


def _share_interval(tuned: float, baseline: float, rows: int) -> list[float] | None:
    """The CONFIDENCE interval, in points, of the difference of two accuracies over `rows` validation rows: the
    normal approximation for two independent proportions (the two models' rows are the same, so a paired interval
    would be narrower: this one does not overstate the difference's certainty). None without rows."""
    if rows < 2:
        return None
    spread = 1.959964 * math.sqrt((tuned * (1 - tuned) + baseline * (1 - baseline)) / rows)
    return [round(100 * (tuned - baseline - spread), 2), round(100 * (tuned - baseline + spread), 2)]


def _recipe_sentence(baseline_trial: dict[str, Any], best: dict[str, Any], recipe: dict[str, Any] | None) -> str:
    """What the search found: the recipe effect, or why there is none to measure."""
    searched, metric = baseline_trial.get("searched_trials"), baseline_trial["metric"]
    if origin(best) == baseline_trial["trial_id"]:
        if searched == 0:
            return ("What the search found: nothing; no trial of the space reached an evaluation, so the budget "
                    "paid for the baseline trial alone.")
        further = origin(best) != best["trial_id"]
        return ("What the search found: no recipe that beat the baseline's on validation, so the export is the "
                f"baseline recipe{' trained further with the rest of the budget' if further else ''}.")
    if not recipe:
        return ("What the search found is not measured: the winner's trial and the baseline's have no evaluations "
                "within the training both reached.")
    unit = "points" if recipe["unit"] == "points" else "%"
    spread = (f"; {CONFIDENCE:.0%} interval {recipe['interval'][0]:+.2f} to {recipe['interval'][1]:+.2f} over "
              f"{recipe['validation_rows']:,} validation rows" if recipe.get("interval") else "")
    verdict = _verdict(recipe["difference"], baseline_trial.get("mode", "max") == "max", recipe.get("interval"),
                       "the tuned recipe", "the baseline recipe")
    tuned = _trained(recipe["tuned_samples"], recipe["tuned_seconds"])
    base = _trained(recipe["baseline_samples"], recipe["baseline_seconds"])
    window = f"{recipe['at']:.0f} s" if recipe["footing"] == "seconds" else f"{recipe['at']:,.0f} samples"
    return (f"What the search found (the recipe effect, on validation at equal {recipe['footing']}: each one's best "
            f"evaluation within its first {window} of training): {metric} "
            f"{recipe['tuned']:.4g} for the tuned recipe ({tuned}) against {recipe['baseline']:.4g} for the baseline "
            f"recipe ({base}), {recipe['difference']:+.2f} {unit}{spread}: {verdict}"
            f"{_early(recipe, baseline_trial) if verdict.endswith('leads') else ''}.")


def _early(recipe: dict[str, Any], baseline_trial: dict[str, Any]) -> str:
    """Where the pairing saw a small part of the export's training: a lead early in training may shrink as both
    recipes train on, and only the equal-time baseline measures the end."""
    export = (baseline_trial.get("arms") or {}).get("export") or {}
    if baseline_trial.get("equal_time") or not export.get("samples") or export["samples"] < 2 * recipe["tuned_samples"]:
        return ""
    return (f", after {recipe['tuned_samples'] / export['samples']:.0%} of the export's training samples: a lead this "
            "early may shrink as both train on (search.baseline.budget: equal measures the end)")


def _verdict(difference: float, higher_is_better: bool, interval, tuned: str, baseline: str) -> str:
    """Which side leads, or that the data cannot tell (a tie, or an interval that holds 0)."""
    if difference == 0:
        return "they tie"
    if interval and interval[0] <= 0 <= interval[1]:
        return "within what the rows can tell apart (the interval holds 0)"
    return f"{tuned if (difference > 0) == higher_is_better else baseline} leads"


def _training_sentence(training: dict[str, Any] | None, metric: str) -> str:
    if not training:
        return ""
    unit = "points" if training["unit"] == "points" else "%"
    before = _trained(training["from_samples"], training["from_seconds"])
    after = _trained(training["to_samples"], training["to_seconds"])
    return (f"What the rest of the budget bought (the training effect: the tuned recipe trained longer, on "
            f"validation): {metric} {training['from']:.4g} after {before} to {training['to']:.4g} after {after}, "
            f"{training['difference']:+.2f} {unit}.")


def _test_sentence(footing: str, test: dict[str, Any], baseline_trial: dict[str, Any], won: bool) -> str:
    """The test split's two scores: a gain only at equal time; otherwise labelled as not one (`won`: the export is
    the baseline recipe itself, trained longer)."""
    name, unit = test["name"], "points" if test["higher_is_better"] else "%"
    arms = baseline_trial.get("arms") or {}
    export, base = arms.get("export") or {}, arms.get("baseline") or {}
    spread = (f"; {CONFIDENCE:.0%} interval {test['interval'][0]:+.2f} to {test['interval'][1]:+.2f} over "
              f"{test['test_rows']:,} test rows" if test["interval"] else "")
    if footing == SAME_CHECKPOINT:
        return f"On the test split: {name} {test['winner']:.4g}; the export is the baseline trial's own checkpoint."
    if footing == EQUAL_TIME:
        verdict = _verdict(test["difference"], test["higher_is_better"], test["interval"], "the export",
                           "the baseline recipe")
        searched = baseline_trial.get("search_seconds")
        whole = f"; the search took {searched:.0f} s in all, trials and further training" if searched else ""
        return (f"The gain at equal time: the baseline recipe trained again from step 0 for "
                f"{baseline_trial['equal_time']['seconds']:.0f} s (its best evaluation, the checkpoint scored, after "
                f"{_trained(base.get('samples'), None)}), as long as the export's runs trained "
                f"({_trained(export.get('samples'), export.get('seconds'))}{whole}): test {name} "
                f"{test['winner']:.4g} against {test['baseline']:.4g}, {test['difference']:+.2f} {unit}{spread}: "
                f"{verdict}.")
    failed = (baseline_trial.get("equal_time") or {}).get("why")
    return (f"On the test split, not at equal footing: the export {name} {test['winner']:.4g} "
            f"({_trained(export.get('samples'), export.get('seconds'))}), the baseline recipe's trial "
            f"{test['baseline']:.4g} ({_trained(base.get('samples'), base.get('seconds'))}); the difference, "
            f"{test['difference']:+.2f} {unit}{spread}, "
            + ("is the same recipe's longer training, not a recipe the search found" if won else
               "mixes the recipe with unequal training and is not what the search bought")
            + (f" (the equal-time baseline was not scored: {failed})." if failed else "." if won else
               " (search.baseline.budget: equal measures that at equal time)."))


def _floor_sentence(name: str, untuned: dict[str, float] | None, floor: dict[str, float] | None,
                    winner: dict[str, float]) -> str:
    """The untuned floor both models started from: a causal LM's base model, a classifier's majority class."""
    if untuned and name in untuned:
        return f"The untuned base model: test {name} {untuned[name]:.4g}{_answers(untuned, winner)}."
    if floor and name in floor:
        return f"The floor: always answering the test split's most frequent class scores {name} {floor[name]:.4g}."
    return ""


def _trained(samples: int | None, seconds: float | None) -> str:
    """'1,624 samples, 95 s' (what is known of it)."""
    parts = [f"{samples:,} samples"] if samples else []
    parts += [f"{seconds:.0f} s"] if seconds else []
    return ", ".join(parts) or "training unknown"


def _answers(untuned: dict[str, float], winner: dict[str, float]) -> str:
    """The untuned base model's greedy answers against the export's, where both answered the test prompts."""
    if ANSWERS_SCORE not in untuned or ANSWERS_SCORE not in winner:
        return ""
    return (f", the ROUGE-L of its greedy answers {untuned[ANSWERS_SCORE]:.3f} against the export's "
            f"{winner[ANSWERS_SCORE]:.3f}")


def paired_with(histories: list[History], best: dict[str, Any], baseline_trial: str | None,
                mode: str) -> dict[str, Any] | None:
    """The trial the export descends from (origin(best)) against the baseline trial at equal training
    (equal_samples.paired), as summary.json keeps it: the recipe effect, apart from the longer training the rest of
    the budget gave the winner. None where no baseline ran, it is that trial, or either lacks evaluations there."""
    tuned = origin(best)
    if baseline_trial is None or tuned == baseline_trial:
        return None
    found = paired(histories, tuned, baseline_trial, mode)
    return found.as_dict() if found else None


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


def majority_share(labels: Iterable[int]) -> dict[str, float] | None:
    """A classifier's floor: the accuracy of always answering the most frequent of `labels` (None without labels)."""
    labels = list(labels)
    if not labels:
        return None
    return {"accuracy": round(Counter(labels).most_common(1)[0][1] / len(labels), 4)}


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
