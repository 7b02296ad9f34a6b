"""The rest of a time budget trains the model that leads at equal training samples (search/selection/equal_samples.py,
search/tuning/exploit.py model_to_train), and the winner's trial is compared with the baseline's there."""

from __future__ import annotations

import math
from pathlib import Path

import pandas

from finesweep.search.selection.baseline import paired_with
from finesweep.search.selection.best import Best
from finesweep.search.selection.equal_samples import History, Paired, choose_model, footing, paired
from finesweep.search.tuning import exploit

# The plain file's trials on the second tweets slice: (samples, validation accuracy).
DEEP = History("277f63be", "minilm-6", ((632, 0.66), (1264, 0.677)))
SHALLOW = History("5bc54160", "minilm-3", ((1712, 0.573), (3424, 0.694)))


def test_the_model_that_learns_more_per_sample_is_trained_further_though_another_led_at_equal_seconds():
    choice = choose_model([DEEP, SHALLOW], searched_best="minilm-3", mode="max")
    # Common samples: the 6-layer trial's 1,264; the 3-layer model's first evaluation came later and counts.
    assert (choice.model, choice.samples, choice.changed) == ("minilm-6", 1264, True)
    assert choice.values == {"minilm-6": 0.677, "minilm-3": 0.573}
    assert "minilm-6 is trained further, not minilm-3" in choice.sentence("eval_accuracy", "minilm-3")


def test_each_model_counts_its_best_evaluation_within_the_common_samples_over_all_its_trials():
    fast = [History("a", "fast", ((500, 0.60), (1000, 0.70), (2000, 0.90))),
            History("b", "fast", ((400, 0.65), (800, 0.72)))]
    slow = [History("c", "slow", ((300, 0.55), (600, 0.69), (900, 0.71)))]
    choice = choose_model(fast + slow, searched_best="fast", mode="max")
    # slow's furthest trial reached 900: fast's best by then is trial b's 0.72 (its 0.90 came with twice the data).
    assert (choice.samples, choice.values, choice.model, choice.changed) == (900, {"fast": 0.72, "slow": 0.71},
                                                                              "fast", False)
    assert "fast leads there too" in choice.sentence("eval_accuracy", "fast")


def test_a_loss_is_minimized_ties_keep_the_searchs_model_and_one_model_needs_no_comparison():
    losses = [History("a", "x", ((100, 0.9), (200, 0.5))), History("b", "y", ((100, 0.7), (200, 0.6)))]
    assert choose_model(losses, "x", "min").model == "x"
    tied = [History("a", "x", ((100, 0.7),)), History("b", "y", ((100, 0.7),))]
    assert choose_model(tied, "y", "max").model == "y" and not choose_model(tied, "y", "max").changed
    assert choose_model([DEEP, History("d", "minilm-6", ((50, 0.4),))], "minilm-6", "max") is None
    diverged = History("e", "minilm-3", ((100, math.nan),))
    assert choose_model([DEEP, diverged], "minilm-6", "max") is None, "a model with no finite evaluation"


def test_the_winners_trial_and_the_baseline_are_paired_within_the_samples_both_reached():
    """The quickstart's two trials: the baseline (fp32) reached 1,496 samples, the file's recipe 2,528; within 1,496
    the recipe's best is its 0.728 at 1,264, against the baseline's 0.694. Seconds unknown: paired on samples."""
    baseline = History("7feed13b", "minilm-mean", ((816, 0.646), (1496, 0.694)))
    tuned = History("faf33212", "minilm-mean", ((1264, 0.728), (2528, 0.764)))
    assert paired([baseline, tuned], "faf33212", "7feed13b", "max") == Paired("samples", 1496, 0.728, 0.694, True,
                                                                             1264, 1496, None, None)
    assert paired([baseline, tuned], "7feed13b", "faf33212", "max") == Paired("samples", 1496, 0.694, 0.728, False,
                                                                             1496, 1264, None, None)
    losses = [History("a", "m", ((100, 0.9), (200, 0.5))), History("b", "m", ((150, 0.7), (300, 0.4)))]
    assert paired(losses, "b", "a", "min").as_dict() == {
        "footing": "samples", "at": 200, "tuned": 0.7, "baseline": 0.5, "tuned_leads": False, "tuned_samples": 150,
        "baseline_samples": 200, "tuned_seconds": None, "baseline_seconds": None}
    even = [History("a", "m", ((100, 0.712),)), History("b", "m", ((100, 0.712),))]
    assert not paired(even, "b", "a", "max").tuned_leads, "a tie: the recipe bought nothing there"
    late = History("c", "m", ((3000, 0.8),))  # its first evaluation came after all of the baseline's samples
    assert paired([baseline, late], "c", "7feed13b", "max") is None, "no evaluation of it within 1,496 samples"
    diverged = History("d", "m", ((100, math.nan),))
    assert paired([baseline, diverged], "d", "7feed13b", "max") is None
    assert paired([baseline], "faf33212", "7feed13b", "max") is None, "a trial without results"


def test_recipes_of_different_speeds_are_paired_at_equal_seconds_and_of_one_speed_at_equal_samples():
    """bf16 against the baseline's fp32 at 1.7x its speed: compared within the seconds both trained (the tuned
    recipe's 0.74 at 95 s, 2,528 samples), not within the baseline's samples, where the tuned recipe's speed would not
    count. At the same speed (within 10%) the samples decide, whatever else ran on the machine."""
    baseline = History("base", "m", ((800, 0.65), (1600, 0.70)), (50.0, 95.0))
    faster = History("tuned", "m", ((1360, 0.71), (2720, 0.74), (4080, 0.75)), (50.0, 95.0, 140.0))
    found = paired([baseline, faster], "tuned", "base", "max")
    assert found == Paired("seconds", 95.0, 0.74, 0.70, True, 2720, 1600, 95.0, 95.0)
    alike = History("tuned", "m", ((800, 0.66), (1600, 0.69), (2400, 0.72)), (52.0, 100.0, 150.0))
    assert footing(alike, baseline) == "samples"
    assert paired([baseline, alike], "tuned", "base", "max") == Paired("samples", 1600, 0.69, 0.70, False, 1600,
                                                                         1600, 100.0, 95.0)
    unknown = History("tuned", "m", ((1360, 0.71), (2720, 0.74)))
    assert footing(unknown, baseline) == "samples", "no seconds: no speed to compare"
    # A baseline that evaluated once, after the faster trial's last evaluation (118 s against 88 s): no pair in
    # seconds, so in samples, where the baseline's 2,200 lean the comparison its way, not the tuned recipe's.
    once = History("base", "m", ((2200, 0.747),), (118.1,))
    quick = History("tuned", "m", ((1304, 0.742), (2608, 0.757)), (50.6, 88.2))
    assert paired([once, quick], "tuned", "base", "max") == Paired("samples", 2200, 0.742, 0.747, False, 1304, 2200,
                                                                     50.6, 118.1)


class _Checkpoint:
    def __init__(self, path: str):
        self.path = path


class _Result:
    """What exploit reads of a Tune Result: its config, its last metrics, every reported row, its kept checkpoints."""

    def __init__(self, history: History, batch: int):
        self.config = {"model": history.model, "effective_batch_size": batch, "learning_rate": 1e-4}
        steps = [(samples // batch, value) for samples, value in history.evaluations]
        self.metrics = {"trial_id": history.trial_id}
        self.metrics_dataframe = pandas.DataFrame({"step": [s for s, _ in steps], "eval_accuracy": [v for _, v in steps],
                                                   "trial_id": history.trial_id,  # 10 samples a second
                                                   "time_total_s": [s / 10 for s, _ in history.evaluations]})
        self.best_checkpoints = [(_Checkpoint(f"/ckpt/{history.trial_id}/{step}"),
                                  {"trial_id": history.trial_id, "step": step, "eval_accuracy": value})
                                 for step, value in steps]


def test_the_continuation_starts_from_the_chosen_models_best_trial_with_the_sentence_that_says_why():
    results = [_Result(DEEP, 8), _Result(SHALLOW, 16)]
    assert [(h.trial_id, h.evaluations, h.seconds) for h in exploit.histories(results, "eval_accuracy")] == \
        [("277f63be", DEEP.evaluations, tuple(s / 10 for s, _ in DEEP.evaluations)),
         ("5bc54160", SHALLOW.evaluations, tuple(s / 10 for s, _ in SHALLOW.evaluations))]
    searched = Best("5bc54160", 214, "eval_accuracy", 0.694, {"model": "minilm-3"}, Path("/ckpt/5bc54160/214"), None)
    picked, why = exploit.model_to_train(searched, results, "eval_accuracy", "max")
    assert (picked.trial_id, picked.step, picked.model) == ("277f63be", 158, "minilm-6")
    assert why.startswith("models compared at equal training samples (1,264: eval_accuracy minilm-6 0.677, minilm-3")
    alone = [_Result(DEEP, 8)]
    deep_best = Best("277f63be", 158, "eval_accuracy", 0.677, {"model": "minilm-6"}, Path("/x"), None)
    assert exploit.model_to_train(deep_best, alone, "eval_accuracy", "max") == (deep_best, None)


def test_the_sweep_pairs_the_trial_its_export_descends_from_with_the_baseline_trial():
    """From Tune's results as the sweep holds them: a continuation's export is paired through the trial it went on
    from; nothing is paired where that trial is the baseline's."""
    baseline, tuned = (History("7feed13b", "m", ((816, 0.646), (1496, 0.694))),
                       History("faf33212", "m", ((1264, 0.728), (2528, 0.764))))
    histories = exploit.histories([_Result(baseline, 8), _Result(tuned, 8)], "eval_accuracy")
    continued = {"trial_id": "exploit-faf33212", "exploitation": {"source_trial": "faf33212", "continued": True}}
    assert paired_with(histories, continued, "7feed13b", "max") == {
        "footing": "samples", "at": 1496, "tuned": 0.728, "baseline": 0.694, "tuned_leads": True, "tuned_samples": 1264,
        "baseline_samples": 1496, "tuned_seconds": 126.4, "baseline_seconds": 149.6}
    of_baseline = {**continued, "exploitation": {"source_trial": "7feed13b", "continued": True}}
    assert paired_with(histories, of_baseline, "7feed13b", "max") is None
    assert paired_with(histories, continued, None, "max") is None, "no baseline trial ran"
