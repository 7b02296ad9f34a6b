"""The baseline (search.baseline): the recipe a user would run without finesweep, trained as the sweep's first trial,
never stopped early by ASHA, at most one epoch, then compared with the winner on the test split."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

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
    assert baseline_point(config.search.baseline, config.space, config.model_names, ["bf16", "fp32"]) == {
        "model": "m", "precision": "fp32", "method": "full", "effective_batch_size": 8, "learning_rate": 5e-5,
        "warmup_ratio": 0.0, "weight_decay": 0.0}


def test_a_lora_space_gets_the_usual_lora_recipe_and_a_dropped_fp32_the_first_precision_kept():
    config = _config({"method": ["lora", "qlora"]})
    point = baseline_point(config.search.baseline, config.space, config.model_names, ["bf16"])
    assert point["method"] == "lora" and point["learning_rate"] == 2e-4 and point["precision"] == "bf16"
    assert (point["lora_r"], point["lora_alpha"]) == (8, 16)


def test_a_recipe_of_the_users_own_and_off():
    config = _config(search={"baseline": {"model": "n", "learning_rate": 3e-5, "effective_batch_size": 32}})
    point = baseline_point(config.search.baseline, config.space, config.model_names, ["fp32"])
    assert (point["model"], point["learning_rate"], point["effective_batch_size"]) == ("n", 3e-5, 32)
    off = _config(search={"baseline": "off"})
    assert baseline_point(off.search.baseline, off.space, off.model_names, ["fp32"]) is None


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
    searcher = make_searcher(config, ["fp32"])
    first, second, *rest = [searcher.suggest(f"t{i}") for i in range(5)]
    assert first[BASELINE_KEY] is True and first["learning_rate"] == 5e-5 and first["effective_batch_size"] == 8
    assert (second["model"], second["learning_rate"], second["effective_batch_size"]) == ("n", 2e-4, 32)
    assert all(BASELINE_KEY not in c and 1e-4 <= c["learning_rate"] <= 1e-3 for c in [second, *rest])


def test_a_grid_search_runs_no_baseline_trial():
    config = _config({"learning_rate": RANGE}, {"algorithm": "grid", "num_trials": 4})
    searcher = make_searcher(config, ["fp32"])
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
    ((300, 50), 800, (100, 50)),  # one epoch of 800 rows at batch 8 is shorter than the trial: 100 steps
    ((60, 20), 8000, (60, 20)),  # the trial is shorter than an epoch: the trial's length
    ((300, 50), 200, (25, 25)),  # an epoch shorter than an evaluation period still ends with an evaluation
    ((300, 50), 0, (300, 50)),  # rows unknown: no cap
])
def test_the_baseline_trains_one_epoch_at_most(planned, rows, expected):
    assert baseline_length(*planned, rows, 8) == expected


def test_the_comparison_says_points_for_accuracy_percent_for_perplexity_and_who_won():
    best = {"trial_id": "b", "step": 40, "metric": "eval_loss", "value": 0.5}
    base = {"trial_id": "a", "step": 60, "metric": "eval_loss", "value": 0.6, "params": {"learning_rate": 5e-5}}
    result = compare(Task.classification, {"accuracy": 0.781, "loss": 0.5}, {"accuracy": 0.766, "loss": 0.6}, best, base)
    assert result["gain"] == 1.5 and result["gain_unit"] == "points" and not result["baseline_won"]
    assert result["validation_gain"] == pytest.approx(-0.1)
    assert "0.781 against 0.766 (+1.50 points): the tuned model is better than the baseline" in result["sentence"]
    lm = compare(Task.causal_lm, {"perplexity": 9.0}, {"perplexity": 10.0}, best, base)
    assert lm["gain"] == -10.0 and "better than" in lm["sentence"]
    won = compare(Task.classification, {"accuracy": 0.7}, {"accuracy": 0.7}, {**best, "trial_id": "a"}, base)
    assert won["baseline_won"] and "the search found nothing better" in won["sentence"]
    # The baseline's own trial trained further with the rest of the budget (search.exploit) is still the baseline
    # recipe: the budget bought the gain, not the search.
    continued = compare(Task.classification, {"accuracy": 0.766}, {"accuracy": 0.7405},
                        {**best, "trial_id": "c", "exploitation": {"source_trial": "a", "continued": True}}, base)
    assert continued["baseline_won"] and continued["gain"] == 2.55
    assert ("the export is the baseline recipe trained further with the rest of the budget (test accuracy 0.766 "
            "against 0.7405 at its checkpoint from the search, +2.55 points)") in continued["sentence"]
    assert "dropout" not in continued["sentence"], "neither trained with a dropout of the sweep's"
    # No trial of the space reached an evaluation (the budget paid for the baseline alone): nothing was compared,
    # and the sentence says so rather than "found nothing better"; the count is kept for a re-export.
    alone = compare(Task.classification, {"accuracy": 0.766}, {"accuracy": 0.7405},
                    {**best, "trial_id": "c", "exploitation": {"source_trial": "a", "continued": True}},
                    {**base, "searched_trials": 0})
    assert alone["sentence"].startswith("the budget paid for the baseline trial alone (no trial of the space reached "
                                        "an evaluation: nothing was compared), so the export is the baseline recipe "
                                        "trained further") and alone["searched_trials"] == 0
    searched = compare(Task.classification, {"accuracy": 0.7}, {"accuracy": 0.7}, {**best, "trial_id": "a"},
                       {**base, "searched_trials": 3})
    assert "the search found nothing better" in searched["sentence"] and searched["searched_trials"] == 3
    undropped = compare(Task.classification, {"accuracy": 0.77}, {"accuracy": 0.7405}, {
        **best, "trial_id": "c", "exploitation": {"source_trial": "a", "continued": True}, "params": {"dropout": 0.0}},
        base)
    assert undropped["sentence"].endswith("; trained further with the space's dropout 0 (the baseline trial kept the "
                                          "checkpoint's, as a user's run does)")
    other = compare(Task.classification, {"accuracy": 0.78}, {"accuracy": 0.7405},
                    {**best, "trial_id": "c", "exploitation": {"source_trial": "b", "continued": True}}, base)
    assert not other["baseline_won"] and "better than the baseline" in other["sentence"]
    assert "samples" not in other["sentence"], "no batch known: no claim about the training"
    # The baseline trained further (its model led at equal samples) improved on nothing: the export is the search's
    # winner, another trial, and the baseline did not win (the plain file on tweets said it had, 2026-11-27).
    kept = compare(Task.classification, {"accuracy": 0.695}, {"accuracy": 0.674},
                   {**best, "exploitation": {"source_trial": "a", "continued": False}}, base)
    assert not kept["baseline_won"] and "better than the baseline recipe" in kept["sentence"]
    # The baseline's continuation ended at max_epochs, and the runner-up model's, trained with the time left, is the
    # export: it descends from that model's trial, not the baseline's.
    runner_up = {"source_trial": "a", "continued": True, "final_trial": "c",
                 "second_leg": {"source_trial": "b", "continued": True, "final_trial": "d"}}
    assert origin({**best, "trial_id": "d", "exploitation": runner_up}) == "b"
    assert origin({**best, "trial_id": "c", "exploitation": {**runner_up, "second_leg": {
        "source_trial": "b", "continued": False, "final_trial": "c"}}}) == "a", "the runner-up lost: the first's"
    # The export named as the leaderboard names it: the continuation by its source, a search trial by its id.
    assert export_name({**best, "trial_id": "d", "exploitation": runner_up}) == "exploit-b"
    assert export_name({**best, "trial_id": "c", "exploitation": {"source_trial": "c", "continued": False}}) == "trial-c"
    longer = compare(Task.classification, {"accuracy": 0.78}, {"accuracy": 0.686},
                     {**best, "trial_id": "c", "step": 1476, "params": {"effective_batch_size": 8}},
                     {**base, "step": 172, "params": {"effective_batch_size": 8}})
    assert longer["sentence"].endswith("; the baseline trained on 1,376 samples inside the sweep's budget, the tuned "
                                       "model on 11,808: part of the gain is the longer training")
    # With the two trials paired at equal samples (the sweep's equal_samples.paired), the recipe's own lead is said.
    even = {"samples": 1376, "tuned": 0.728, "baseline": 0.694}
    split = compare(Task.classification, {"accuracy": 0.78}, {"accuracy": 0.686},
                    {**best, "trial_id": "c", "step": 1476, "params": {"effective_batch_size": 8}},
                    {**base, "step": 172, "params": {"effective_batch_size": 8}, "equal_samples": even})
    assert split["equal_samples"] == even and split["sentence"].endswith(
        "part of the gain is the longer training (the best validation eval_loss within the first 1,376 samples of "
        "each: 0.728 for the tuned recipe, 0.694 for the baseline)")
    assert compare(Task.classification, {"accuracy": 0.7}, {"accuracy": 0.7}, {**best, "trial_id": "a"},
                   {**base, "equal_samples": even})["equal_samples"] is None, "the baseline won: nothing to pair"
    # Where the tuned recipe did not lead at equal samples (the quickstart, 2026-11-29: 0.712 each), the whole gain
    # is the longer training, and the sentence says so.
    tied = {"samples": 1640, "tuned": 0.712, "baseline": 0.712, "tuned_leads": False}
    longer_only = compare(Task.classification, {"accuracy": 0.7755}, {"accuracy": 0.699},
                          {**best, "trial_id": "c", "step": 1605, "params": {"effective_batch_size": 8}},
                          {**base, "step": 205, "params": {"effective_batch_size": 8}, "equal_samples": tied})
    assert longer_only["sentence"].endswith(
        "the tuned model on 12,840: the gain is the longer training (the best validation eval_loss "
        "within the first 1,640 samples of each: 0.712 for the tuned recipe, 0.712 for the baseline)")
    led = compare(Task.classification, {"accuracy": 0.78}, {"accuracy": 0.686},
                  {**best, "trial_id": "c", "step": 1476, "params": {"effective_batch_size": 8}},
                  {**base, "step": 172, "params": {"effective_batch_size": 8},
                   "equal_samples": {**even, "tuned_leads": True}})
    assert led["sentence"] == split["sentence"], "a summary written before tuned_leads reads as one where it led"


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


def test_the_comparison_says_the_gains_interval_and_calls_a_gain_within_it_neither_better_nor_worse():
    best = {"trial_id": "b", "step": 40, "metric": "eval_accuracy", "value": 0.8}
    base = {"trial_id": "a", "step": 60, "metric": "eval_accuracy", "value": 0.79, "params": {"learning_rate": 5e-5}}
    noisy = compare(Task.classification, {"accuracy": 0.8}, {"accuracy": 0.79}, best, base,
                    rows=_right_rows(1500, 100, 80, 320), seed=1)
    low, high = noisy["gain_interval"]
    assert noisy["test_rows"] == 2000 and low < 0 < high
    assert noisy["sentence"] == (
        f"tuned vs baseline: test accuracy 0.8 against 0.79 (+1.00 points; 95% interval {low:+.2f} to {high:+.2f} over "
        "2,000 test rows): the tuned model scored above the baseline recipe by less than the test split can tell apart "
        "(the interval holds 0: more test rows would tell)")
    clear = compare(Task.classification, {"accuracy": 0.85}, {"accuracy": 0.76}, best, base,
                    rows=_right_rows(1500, 200, 20, 280), seed=1)
    assert clear["gain_interval"][0] > 0 and clear["sentence"].endswith("the tuned model is better than the baseline "
                                                                        "recipe")
    # The baseline's own recipe trained further: its checkpoint from the search against the export, with the interval.
    continued = compare(Task.classification, {"accuracy": 0.85}, {"accuracy": 0.76},
                        {**best, "trial_id": "c", "exploitation": {"source_trial": "a", "continued": True}}, base,
                        rows=_right_rows(1500, 200, 20, 280), seed=1)
    assert continued["baseline_won"] and "+9.00 points; 95% interval +" in continued["sentence"]
    # No rows (the same checkpoint, or a summary written before the interval): no interval, the sentence as before.
    plain = compare(Task.classification, {"accuracy": 0.8}, {"accuracy": 0.79}, best, base)
    assert plain["gain_interval"] is None and plain["sentence"].endswith("(+1.00 points): the tuned model is better "
                                                                         "than the baseline recipe")


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
    searcher = make_searcher(config, ["bf16", "fp32"])
    first, second, third = [searcher.suggest(f"t{i}") for i in range(3)]
    assert first[BASELINE_KEY] is True and (first["model"], first["precision"]) == ("first", "fp32")
    assert second["learning_rate"] == pytest.approx(1e-4) and second["effective_batch_size"] == 16
    assert (second["model"], second["precision"]) == ("first", "bf16"), "the model listed first, the fastest precision"
    assert second["warmup_ratio"] == pytest.approx(0.1) and BASELINE_KEY not in second | third
    random = _config({"learning_rate": RANGE}, {"algorithm": "random", "baseline": "off"})
    assert make_searcher(random, ["fp32"]).suggest("t0")["learning_rate"] != pytest.approx(math.sqrt(1e-4 * 1e-3))


def test_with_a_learning_rate_per_method_tpe_tries_the_baseline_then_another_methods_centre():
    """A real OptunaSearch over full fine-tuning and LoRA with their default ranges: the baseline (full, 5e-5), the
    centre of LoRA's range (the full range's centre would repeat the baseline), then every trial in its method's
    own range, TPE's modelled samples too."""
    config = _config({"method": ["full", "lora"], "effective_batch_size": [8]}, {"num_trials": 24})
    searcher = make_searcher(config, ["fp32"])
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

