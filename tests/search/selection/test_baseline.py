"""The baseline (search.baseline): the recipe a user would run without finesweep, trained as the sweep's first trial,
never stopped early by ASHA, at most the Trainer's 3 epochs, then compared with the winner on the test split."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from finesweep.search.budget.plan import unplanned
from finesweep.search.selection.baseline import compare, export_name, gain_interval, majority_class_warnings, origin
from finesweep.search.selection.best import BEST_SO_FAR
from finesweep.search.tuning.context import baseline_length
from finesweep.search.tuning.ray_compat import optuna_study_of
from finesweep.search.tuning.samplers import BaselineKeepingASHA, make_searcher
from finesweep.spaces import SweepConfig, SweepFileError, Task
from finesweep.spaces import load
from finesweep.spaces.space import BASELINE_KEY, baseline_point
from finesweep.trainer.serving.evaluate import RowScores

MINIMAL = {"name": "s", "data": {"path": "data.csv"}, "models": [{"name": "m", "path": "model"},
                                                                  {"name": "n", "path": "model"}]}
RANGE = {"low": 1e-4, "high": 1e-3, "log": True}


def _config(space: dict | None = None, search: dict | None = None) -> SweepConfig:
    return SweepConfig.model_validate({**MINIMAL, "space": space or {}, "search": search or {}})


def test_auto_is_the_trainers_defaults_for_the_first_candidate():
    config = _config({"learning_rate": RANGE, "effective_batch_size": [16, 32], "precision": ["bf16", "fp32"]})
    assert baseline_point(config.search.baseline, config.space, config.baseline_model, ["bf16", "fp32"]) == {
        "model": "m", "precision": "fp32", "method": "full", "effective_batch_size": 8, "learning_rate": 5e-5,
        "warmup_ratio": 0.0, "weight_decay": 0.0}


def test_auto_trains_the_first_candidate_with_transformers_own_head():
    """A plain Trainer run builds transformers' own head: a candidate listed first with finesweep's mean pooling is
    not what a user would run without finesweep; the user's choice (search.baseline.model) stands."""
    models = [{"name": "mean", "path": "model", "pooling": "mean"}, {"name": "cls", "path": "model"}]
    config = SweepConfig.model_validate({**MINIMAL, "models": models})
    assert config.baseline_model == "cls"
    only_mean = SweepConfig.model_validate({**MINIMAL, "models": models[:1]})
    assert only_mean.baseline_model == "mean", "no candidate with transformers' head: the first"
    chosen = SweepConfig.model_validate({**MINIMAL, "models": models, "search": {"baseline": {"model": "mean"}}})
    assert chosen.baseline_model == "mean"


def test_a_lora_space_gets_the_usual_lora_recipe_and_a_dropped_fp32_the_first_precision_kept():
    config = _config({"method": ["lora", "qlora"]})
    point = baseline_point(config.search.baseline, config.space, config.baseline_model, ["bf16"])
    assert point["method"] == "lora" and point["learning_rate"] == 2e-4 and point["precision"] == "bf16"
    assert (point["lora_r"], point["lora_alpha"]) == (8, 16)


def test_a_recipe_of_the_users_own_and_off():
    config = _config(search={"baseline": {"model": "n", "learning_rate": 3e-5, "effective_batch_size": 32}})
    point = baseline_point(config.search.baseline, config.space, config.baseline_model, ["fp32"])
    assert (point["model"], point["learning_rate"], point["effective_batch_size"]) == ("n", 3e-5, 32)
    off = _config(search={"baseline": "off"})
    assert baseline_point(off.search.baseline, off.space, off.baseline_model, ["fp32"]) is None


def test_a_baseline_the_probe_cannot_measure_is_a_sweep_file_error(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({**MINIMAL, "search": {"baseline": {"model": "x", "method": "lora"}}}))
    with pytest.raises(SweepFileError) as error:
        load(sweep)
    text = str(error.value)
    assert "search.baseline.model: 'x' is not among the space's models" in text
    assert "search.baseline.method: 'lora' is not among space.method ['full']" in text


def test_the_first_trial_is_the_baseline_and_the_initial_points_follow_it():
    """A real OptunaSearch as the sweep builds it: trial 1 carries the baseline's recipe (outside the space: its
    learning rate and batch are not the space's), trial 2 the user's initial point, later trials the space."""
    config = _config({"learning_rate": RANGE, "effective_batch_size": [16, 32]},
                     {"initial_points": [{"model": "n", "learning_rate": 2e-4, "effective_batch_size": 32}]})
    searcher = make_searcher(config, unplanned(config, 1), ["fp32"])
    first, second, *rest = [searcher.suggest(f"t{i}") for i in range(5)]
    assert first[BASELINE_KEY] is True and first["learning_rate"] == 5e-5 and first["effective_batch_size"] == 8
    assert (second["model"], second["learning_rate"], second["effective_batch_size"]) == ("n", 2e-4, 32)
    assert all(BASELINE_KEY not in c and 1e-4 <= c["learning_rate"] <= 1e-3 for c in [second, *rest])


def test_a_grid_search_runs_no_baseline_trial():
    config = _config({"learning_rate": RANGE}, {"algorithm": "grid", "num_trials": 4})
    searcher = make_searcher(config, unplanned(config, 1), ["fp32"])
    assert all(BASELINE_KEY not in searcher.suggest(f"t{i}") for i in range(4))


def test_asha_stops_a_poor_trial_but_never_the_baseline():
    scheduler = BaselineKeepingASHA(time_attr="training_iteration", max_t=8, grace_period=1, reduction_factor=2,
                                    metric="loss", mode="min")
    good, poor, baseline = (SimpleNamespace(trial_id=name, config=config) for name, config in
                            (("good", {}), ("poor", {}), ("baseline", {BASELINE_KEY: True})))
    for trial in (good, poor, baseline):
        scheduler.on_trial_add(None, trial)
    assert scheduler.on_trial_result(None, good, {"training_iteration": 1, "loss": 0.1}) == "CONTINUE"
    assert scheduler.on_trial_result(None, poor, {"training_iteration": 1, "loss": 0.9}) == "STOP"
    assert scheduler.on_trial_result(None, baseline, {"training_iteration": 1, "loss": 0.9}) == "CONTINUE"


@pytest.mark.parametrize("planned, rows, expected", [
    ((400, 50), 800, (300, 50)),  # 3 epochs of 800 rows at batch 8 are shorter than the trial: 300 steps
    ((60, 20), 8000, (60, 20)),  # the trial is shorter than 3 epochs: the trial's length
    ((300, 50), 80, (30, 30)),  # 3 epochs shorter than an evaluation period still end with an evaluation
    ((300, 50), 0, (300, 50)),  # rows unknown: no cap
])
def test_the_baseline_trains_the_trainers_three_epochs_at_most(planned, rows, expected):
    assert baseline_length(*planned, rows, 8) == expected


BEST = {"trial_id": "c", "step": 1476, "metric": "eval_accuracy", "value": 0.79,
        "params": {"effective_batch_size": 8}, "exploitation": {"source_trial": "b", "continued": True}}
# The quickstart's shape: the baseline trial trained 1,624 samples in 150 s, the export 11,808 in 390 s; at equal
# seconds on validation the tuned recipe had 0.702 after 2,400 samples, the baseline 0.698 after 1,624.
PAIRED = {"footing": "seconds", "at": 150.0, "tuned": 0.702, "baseline": 0.698, "tuned_leads": True,
          "tuned_samples": 2400, "baseline_samples": 1624, "tuned_seconds": 148.0, "baseline_seconds": 150.0}
ARMS = {"export": {"samples": 11808, "seconds": 390.0}, "baseline": {"samples": 1624, "seconds": 150.0}}
BASE = {"trial_id": "a", "step": 203, "metric": "eval_accuracy", "value": 0.698, "mode": "max",
        "params": {"effective_batch_size": 8, "learning_rate": 5e-5}, "recipe_effect": PAIRED, "arms": ARMS,
        "validation_rows": 1000}
VERDICT_WORDS = re.compile(r"\b(better|worse|gains?)\b", re.IGNORECASE)


@pytest.mark.parametrize("task, winner, baseline", [
    (Task.classification, {"accuracy": 0.794}, {"accuracy": 0.6865}),  # the export far above its trial
    (Task.classification, {"accuracy": 0.70}, {"accuracy": 0.72}),  # below it
    (Task.causal_lm, {"perplexity": 14.17}, {"perplexity": 42.21}),  # the LLM sweep's one-step baseline
])
@pytest.mark.parametrize("rows", [None, "rows"])
def test_a_comparison_of_arms_trained_unequally_never_says_better_worse_or_gain(task, winner, baseline, rows):
    scores = _right_rows(1500, 200, 20, 280) if rows else None
    found = compare(task, winner, baseline, BEST, BASE, rows=scores, seed=1)
    assert found["footing"] == "unequal" and found["gain"] is None and found["gain_interval"] is None
    name = next(iter(winner))
    expected = 100 * (winner[name] - baseline[name]) * (1 if name == "accuracy" else 1 / baseline[name])
    assert found["difference"] == pytest.approx(expected, abs=0.01)
    assert not VERDICT_WORDS.search(found["sentence"]), found["sentence"]
    test_line = next(line for line in found["sentences"] if line.startswith("On the test split"))
    assert test_line.startswith("On the test split, not at equal footing")
    assert "(11,808 samples, 390 s)" in test_line and "(1,624 samples, 150 s)" in test_line
    assert "search.baseline.budget: equal measures that" in test_line


def test_the_recipe_effect_and_the_training_effect_are_told_apart_with_what_trained_each():
    found = compare(Task.classification, {"accuracy": 0.794}, {"accuracy": 0.6865}, BEST, BASE)
    recipe, training = found["recipe_effect"], found["training_effect"]
    assert recipe["difference"] == 0.4 and recipe["unit"] == "points"
    # Two accuracies over 1,000 validation rows: about 4 points either way, so +0.4 is within what they tell.
    spread = 1.959964 * math.sqrt((0.702 * 0.298 + 0.698 * 0.302) / 1000)
    assert recipe["interval"] == [round(100 * (0.004 - spread), 2), round(100 * (0.004 + spread), 2)]
    assert found["sentences"][0] == (
        "What the search found (the recipe effect, on validation at equal seconds: each one's best evaluation within "
        "its first 150 s of training): eval_accuracy 0.702 for the tuned recipe (2,400 samples, 148 s) against 0.698 "
        "for the baseline recipe (1,624 samples, 150 s), +0.40 points; 95% "
        f"interval {recipe['interval'][0]:+.2f} to {recipe['interval'][1]:+.2f} over 1,000 validation rows: within "
        "what the rows can tell apart (the interval holds 0).")
    assert training == {"from": 0.702, "to": 0.79, "from_samples": 2400, "from_seconds": 148.0, "to_samples": 11808,
                        "to_seconds": 390.0, "difference": 8.8, "unit": "points"}
    assert found["sentences"][1] == (
        "What the rest of the budget bought (the training effect: the tuned recipe trained longer, on validation): "
        "eval_accuracy 0.702 after 2,400 samples, 148 s to 0.79 after 11,808 samples, 390 s, +8.80 points.")
    clear = compare(Task.classification, {"accuracy": 0.794}, {"accuracy": 0.6865}, BEST,
                    {**BASE, "validation_rows": 1_000_000})
    assert ": the tuned recipe leads, after 20% of the export's" in clear["sentences"][0]
    late = compare(Task.classification, {"accuracy": 0.794}, {"accuracy": 0.6865}, BEST,
                   {**BASE, "arms": {**ARMS, "export": {"samples": 4000, "seconds": 150.0}}})
    assert "export's training samples" not in late["sentences"][0], "paired over half the export's training"
    losses = {**PAIRED, "tuned": 0.9, "baseline": 1.0, "footing": "samples"}
    by_loss = compare(Task.causal_lm, {"perplexity": 9.0}, {"perplexity": 10.0}, {**BEST, "metric": "eval_loss",
                      "value": 0.8}, {**BASE, "metric": "eval_loss", "mode": "min", "recipe_effect": losses})
    assert by_loss["recipe_effect"]["difference"] == -10.0 and by_loss["recipe_effect"]["interval"] is None
    assert "eval_loss 0.9 for the tuned recipe" in by_loss["sentences"][0]
    assert "-10.00 %: the tuned recipe leads, after 20%" in by_loss["sentences"][0]
    tied = compare(Task.classification, {"accuracy": 0.7755}, {"accuracy": 0.699}, BEST,
                   {**BASE, "recipe_effect": {**PAIRED, "tuned": 0.712, "baseline": 0.712, "tuned_leads": False}})
    assert tied["sentences"][0].endswith("+0.00 points; 95% interval " + tied["sentences"][0].split("interval ")[1]
                                         .split(": ")[0] + ": they tie.")
    unpaired = compare(Task.classification, {"accuracy": 0.78}, {"accuracy": 0.74}, BEST, {**BASE, "recipe_effect": None})
    assert unpaired["recipe_effect"] is None and unpaired["training_effect"] is None
    assert unpaired["sentences"][0].startswith("What the search found is not measured")


def test_an_equal_time_baseline_makes_the_test_difference_a_gain_with_its_interval():
    equal = {"seconds": 390.0, "trained_seconds": 392.5,
             "checkpoint": {"trial_id": "e", "step": 5600, "params": {"effective_batch_size": 8}}}
    arms = {**ARMS, "baseline": {"samples": 44800, "seconds": 392.5}}
    found = compare(Task.classification, {"accuracy": 0.794}, {"accuracy": 0.79}, BEST,
                    {**BASE, "equal_time": equal, "arms": arms, "search_seconds": 396.0},
                    rows=_right_rows(1500, 100, 92, 308), seed=1)
    low, high = found["gain_interval"]
    assert found["footing"] == "equal_time" and found["gain"] == found["difference"] == 0.4
    assert found["gain_interval"] == found["difference_interval"] and low < 0 < high
    assert found["sentences"][2] == (
        "The gain at equal time: the baseline recipe trained again from step 0 for 390 s (its best evaluation, the "
        "checkpoint scored, after 44,800 samples), as long as the export's runs trained (11,808 samples, 390 s; the search "
        "took 396 s in all, trials and further training): test accuracy 0.794 against 0.79, +0.40 points; 95% "
        f"interval {low:+.2f} to {high:+.2f} over 2,000 test rows: within what the rows can tell apart (the interval "
        "holds 0).")
    ahead = compare(Task.classification, {"accuracy": 0.85}, {"accuracy": 0.76}, BEST,
                    {**BASE, "equal_time": equal, "arms": arms}, rows=_right_rows(1500, 200, 20, 280), seed=1)
    assert ahead["sentences"][2].endswith(": the export leads.")
    behind = compare(Task.classification, {"accuracy": 0.76}, {"accuracy": 0.85}, BEST,
                     {**BASE, "equal_time": equal, "arms": arms}, rows=_right_rows(1500, 20, 200, 280), seed=1)
    assert behind["sentences"][2].endswith(": the baseline recipe leads.") and behind["gain"] == -9.0
    failed = compare(Task.classification, {"accuracy": 0.794}, {"accuracy": 0.6865}, BEST,
                     {**BASE, "equal_time": {"seconds": 390.0, "checkpoint": None, "why": "it reported no evaluation"}})
    assert failed["footing"] == "unequal" and failed["gain"] is None
    assert "(the equal-time baseline was not scored: it reported no evaluation)." in failed["sentence"]


def test_the_baseline_winning_or_no_search_says_what_the_search_found_and_the_floor_stays():
    won = compare(Task.classification, {"accuracy": 0.7}, {"accuracy": 0.7},
                  {**BEST, "trial_id": "a", "step": 203, "exploitation": None}, BASE, floor={"accuracy": 0.429})
    assert won["baseline_won"] and won["footing"] == "same_checkpoint" and won["recipe_effect"] is None
    assert won["sentences"] == [
        "What the search found: no recipe that beat the baseline's on validation, so the export is the baseline "
        "recipe.",
        "On the test split: accuracy 0.7; the export is the baseline trial's own checkpoint.",
        "The floor: always answering the test split's most frequent class scores accuracy 0.429."]
    continued = compare(Task.classification, {"accuracy": 0.766}, {"accuracy": 0.7405},
                        {**BEST, "exploitation": {"source_trial": "a", "continued": True}}, {**BASE, "recipe_effect": None})
    assert continued["baseline_won"] and continued["footing"] == "unequal"
    assert continued["sentences"][1].endswith("is the same recipe's longer training, not a recipe the search found.")
    assert continued["sentences"][0].endswith("so the export is the baseline recipe trained further with the rest of "
                                              "the budget.")
    alone = compare(Task.classification, {"accuracy": 0.766}, {"accuracy": 0.7405},
                    {**BEST, "exploitation": {"source_trial": "a", "continued": True}},
                    {**BASE, "recipe_effect": None, "searched_trials": 0})
    assert alone["sentences"][0].startswith("What the search found: nothing; no trial of the space reached an "
                                            "evaluation") and alone["searched_trials"] == 0
    lm = compare(Task.causal_lm, {"perplexity": 14.17, "gen_rouge_l": 0.121}, {"perplexity": 17.8}, BEST, BASE,
                 untuned={"perplexity": 48.18, "gen_rouge_l": 0.05})
    assert lm["sentences"][-1] == ("The untuned base model: test perplexity 48.18, the ROUGE-L of its greedy answers "
                                   "0.050 against the export's 0.121.")
    # The export named as the leaderboard names it; a runner-up's continuation descends from its own trial.
    runner_up = {"source_trial": "a", "continued": True, "final_trial": "c",
                 "second_leg": {"source_trial": "b", "continued": True, "final_trial": "d"}}
    assert origin({**BEST, "trial_id": "d", "exploitation": runner_up}) == "b"
    assert origin({**BEST, "trial_id": "c", "exploitation": {**runner_up, "second_leg": {
        "source_trial": "b", "continued": False, "final_trial": "c"}}}) == "a", "the runner-up lost: the first's"
    assert export_name({**BEST, "trial_id": "d", "exploitation": runner_up}) == "exploit-b"
    assert export_name({**BEST, "trial_id": "c", "exploitation": {"source_trial": "c", "continued": False}}) == "trial-c"


def _right_rows(both: int, tuned_only: int, baseline_only: int, neither: int) -> tuple[RowScores, RowScores]:
    """Two classifiers' RowScores on the same test rows: right on both, on one of them alone, or on neither."""
    tuned = np.repeat([1.0, 1.0, 0.0, 0.0], [both, tuned_only, baseline_only, neither])
    baseline = np.repeat([1.0, 0.0, 1.0, 0.0], [both, tuned_only, baseline_only, neither])
    return RowScores(tuned, np.ones_like(tuned)), RowScores(baseline, np.ones_like(baseline))


def test_the_gains_interval_is_a_paired_bootstrap_over_the_test_rows():
    # 2,000 rows, the two models disagreeing on 180: +1 point, and a pair of models that differ on 180 rows of 2,000
    # moves by about 1.3 points either way (the normal approximation: 1.96 x the paired differences' standard error).
    tuned, baseline = _right_rows(1500, 100, 80, 320)
    low, high = gain_interval(Task.classification, tuned, baseline, seed=1)
    differences = tuned.values - baseline.values
    half_width = 100 * 1.96 * differences.std(ddof=1) / math.sqrt(len(differences))
    assert low < 0 < 1.0 < high
    assert low == pytest.approx(1.0 - half_width, abs=0.2) and high == pytest.approx(1.0 + half_width, abs=0.2)
    assert gain_interval(Task.classification, tuned, baseline, seed=1) == (low, high), "the sweep's seed: repeatable"
    # The same test accuracies with the models agreeing less would be wider: the pairing is what narrows it.
    apart_low, apart_high = gain_interval(Task.classification, *_right_rows(1200, 400, 380, 20), seed=1)
    assert apart_high - apart_low > 1.5 * (high - low)  # 780 rows apart against 180: sqrt(780 / 180) = 2.1x
    # A lead the rows can tell: 200 against 20 rows.
    clear = gain_interval(Task.classification, *_right_rows(1500, 200, 20, 280), seed=1)
    assert 0 < clear[0] < 9.0 < clear[1]
    # A causal LM: perplexity is exp(the token-weighted mean loss), its gain in percent (- is better).
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 40, size=300).astype(float)
    base_loss = tokens * rng.uniform(2.0, 3.0, size=300)
    tuned_loss = base_loss * rng.uniform(0.85, 0.95, size=300)
    lm = gain_interval(Task.causal_lm, RowScores(tuned_loss, tokens), RowScores(base_loss, tokens), seed=1)
    point = 100 * (math.exp(tuned_loss.sum() / tokens.sum()) / math.exp(base_loss.sum() / tokens.sum()) - 1)
    assert lm[0] < point < lm[1] < 0
    one_row = RowScores(np.ones(1), np.ones(1))
    assert gain_interval(Task.classification, one_row, one_row) is None, "nothing to resample"


def test_a_winner_on_the_edge_of_the_space_is_named_with_the_field_to_widen():
    from finesweep.search.selection.edges import edge_warnings

    space = _config({"learning_rate": {"low": 5e-5, "high": 3e-4, "log": True}, "effective_batch_size": [8, 16, 32],
                     "warmup_ratio": {"low": 0.0, "high": 0.2}}).space
    others = [{"learning_rate": 1e-4, "effective_batch_size": 16, "warmup_ratio": 0.05}]
    winner = {"learning_rate": 2.9e-4, "effective_batch_size": 32, "warmup_ratio": 0.1}
    top = edge_warnings(winner, space, [winner, *others])
    assert top == ["the winner's learning_rate 0.00029 lies at the top of space.learning_rate [5e-05, 0.0003]: the best "
                   "may lie beyond it; widen space.learning_rate.high (to 0.0006, say)",
                   "the winner's effective_batch_size 32 is the largest in space.effective_batch_size [8, 16, 32]: the "
                   "best may lie beyond it; add 64 to space.effective_batch_size"]
    winner = {"learning_rate": 5.2e-5, "effective_batch_size": 16, "warmup_ratio": 0.0}
    bottom = edge_warnings(winner, space, [winner, *others])
    # A warm-up of 0 at the bottom of [0, 0.2]: there is nothing below it to search.
    assert [w.split(";")[1].strip() for w in bottom] == ["widen space.learning_rate.low (to 2.5e-05, say)"]
    winner = {"learning_rate": 1.2e-4, "effective_batch_size": 16, "warmup_ratio": 0.1}
    assert edge_warnings(winner, space, [winner, *others]) == []


def test_an_end_no_other_trial_varied_is_not_called_an_edge():
    """The quickstart's short budget runs the baseline and the space's centre: batch 8 of [8, 16] wins without a
    trial at 16, so nothing says a smaller batch would do better. Once another batch was tried and lost, it does."""
    from finesweep.search.selection.edges import edge_warnings

    space = _config({"learning_rate": {"low": 5e-5, "high": 3e-4, "log": True}, "effective_batch_size": [8, 16]}).space
    centre = {"learning_rate": 1.22e-4, "effective_batch_size": 8}
    assert edge_warnings(centre, space, [centre]) == []
    same_batch = {"learning_rate": 2.5e-4, "effective_batch_size": 8}
    assert edge_warnings(centre, space, [centre, same_batch]) == []
    larger = {"learning_rate": 2.5e-4, "effective_batch_size": 16}
    assert edge_warnings(centre, space, [centre, larger]) == [
        "the winner's effective_batch_size 8 is the smallest in space.effective_batch_size [8, 16]: the best may lie "
        "beyond it; add 4 to space.effective_batch_size"]
    initial = {"learning_rate": 5.2e-5, "effective_batch_size": 8}  # an initial point at the bottom, alone
    assert edge_warnings(initial, space, [initial]) == []


def test_a_learning_rate_per_method_is_an_edge_of_the_winners_methods_range_which_its_trials_varied():
    from finesweep.search.selection.edges import edge_warnings

    space = _config({"method": ["full", "lora"], "effective_batch_size": [8]}).space  # full 1e-5..2e-4, LoRA 5e-5..1e-3
    winner = {"method": "full", "learning_rate": 1.95e-4, "effective_batch_size": 8}  # the top of full's own range
    lora = [{"method": "lora", "learning_rate": rate, "effective_batch_size": 8} for rate in (1e-4, 9e-4)]
    assert edge_warnings(winner, space, [winner, *lora]) == [], "only LoRA's trials varied the rate"
    other_full = {"method": "full", "learning_rate": 4e-5, "effective_batch_size": 8}
    assert edge_warnings(winner, space, [winner, other_full, *lora]) == [
        "the winner's learning_rate 0.000195 lies at the top of space.learning_rate.full [1e-05, 0.0002]: the best may "
        "lie beyond it; widen space.learning_rate.full.high (to 0.0004, say)"]


def test_the_compared_trials_are_the_searchs_evaluated_ones_not_the_baseline():
    from types import SimpleNamespace

    from finesweep.search.selection.best import BEST_SO_FAR, compared_params
    from finesweep.spaces.space import BASELINE_KEY

    def result(config, best_so_far):
        return SimpleNamespace(config=config, metrics={BEST_SO_FAR: best_so_far} if best_so_far is not None else {})

    results = [result({"learning_rate": 5e-5, "effective_batch_size": 8, BASELINE_KEY: True}, 0.70),
               result({"learning_rate": 1.2e-4, "effective_batch_size": 8, "trial_index": 1}, 0.73),
               result({"learning_rate": 2.5e-4, "effective_batch_size": 16}, None),  # never evaluated
               result({"learning_rate": 3e-4, "effective_batch_size": 16}, float("nan"))]  # diverged
    assert compared_params(results) == [{"learning_rate": 1.2e-4, "effective_batch_size": 8}]


def test_without_initial_points_tpe_tries_the_baseline_then_the_spaces_centre():
    config = SweepConfig.model_validate({
        **MINIMAL, "models": [{"name": "first", "path": "p"}, {"name": "second", "path": "p"}],
        "space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "effective_batch_size": [8, 16, 32],
                  "warmup_ratio": {"low": 0.0, "high": 0.2}, "precision": ["fp32", "bf16"]}})
    # The probe orders the precisions fastest first (bf16 here); the baseline keeps the Trainer's fp32.
    searcher = make_searcher(config, unplanned(config, 1), ["bf16", "fp32"])
    first, second, third = [searcher.suggest(f"t{i}") for i in range(3)]
    assert first[BASELINE_KEY] is True and (first["model"], first["precision"]) == ("first", "fp32")
    assert second["learning_rate"] == pytest.approx(1e-4) and second["effective_batch_size"] == 16
    assert (second["model"], second["precision"]) == ("first", "bf16"), "the model listed first, the fastest precision"
    assert second["warmup_ratio"] == pytest.approx(0.1) and BASELINE_KEY not in second | third
    random = _config({"learning_rate": RANGE}, {"algorithm": "random", "baseline": "off"})
    assert make_searcher(random, unplanned(random, 1), ["fp32"]).suggest("t0")["learning_rate"] != pytest.approx(math.sqrt(1e-4 * 1e-3))


def test_with_a_learning_rate_per_method_tpe_tries_the_baseline_then_another_methods_centre():
    """A real OptunaSearch over full fine-tuning and LoRA with their default ranges: the baseline (full, 5e-5), the
    centre of LoRA's range (the full range's centre would repeat the baseline), then every trial in its method's
    own range, TPE's modelled samples too."""
    config = _config({"method": ["full", "lora"], "effective_batch_size": [8]}, {"num_trials": 24})
    searcher = make_searcher(config, unplanned(config, 1), ["fp32"])
    first, second, *rest = [searcher.suggest(f"t{i}") for i in range(3)]
    assert first[BASELINE_KEY] is True and (first["method"], first["learning_rate"]) == ("full", 5e-5)
    assert second["method"] == "lora" and second["learning_rate"] == pytest.approx(math.sqrt(5e-5 * 1e-3))
    ranges, best = {"full": (1e-5, 2e-4), "lora": (5e-5, 1e-3)}, {"full": 1e-4, "lora": 5e-4}
    for number in range(3, 24):  # past TPE's random start (8 of 24 trials): its model samples too
        done = rest[-1]
        loss = abs(math.log(done["learning_rate"] / best[done["method"]]))
        searcher.on_trial_complete(f"t{number - 1}", {BEST_SO_FAR: loss})
        rest.append(searcher.suggest(f"t{number}"))
    assert sum(t.state.name == "COMPLETE" for t in optuna_study_of(searcher).trials) == 21
    assert {c["method"] for c in rest} == {"full", "lora"}
    outside = [c for c in rest if not ranges[c["method"]][0] <= c["learning_rate"] <= ranges[c["method"]][1]]
    assert not outside, outside


def test_a_classifier_no_better_than_its_test_splits_most_frequent_class_is_told_so():
    labels = [1] * 6 + [0] * 4  # class 'pos' is 0.6 of the rows
    [warning] = majority_class_warnings({"accuracy": 0.55}, labels, ["neg", "pos"])
    assert warning.startswith("test accuracy 0.5500 is no better than always answering the test split's most "
                              "frequent class 'pos' (0.6000 of its 10 rows)")
    assert "data.label_column" in warning and "data.text_column" in warning
    assert majority_class_warnings({"accuracy": 0.6}, labels, None)[0].count("class '1'") == 1  # a tie is no better
    assert majority_class_warnings({"accuracy": 0.61}, labels, ["neg", "pos"]) == []
    assert majority_class_warnings({"accuracy": 0.1}, [], None) == []
    assert majority_class_warnings({"perplexity": 9.0}, labels, None) == []

