"""The rest of a time budget trains the model that leads at equal training samples (search/selection/equal_samples.py,
search/tuning/exploit.py model_to_train)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas

from finesweep.search.selection.best import Best
from finesweep.search.selection.equal_samples import History, choose_model
from finesweep.search.tuning import exploit

# The plain file's trials on the second tweets slice (eleventh session): (samples, validation accuracy).
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
                                                   "trial_id": history.trial_id})
        self.best_checkpoints = [(_Checkpoint(f"/ckpt/{history.trial_id}/{step}"),
                                  {"trial_id": history.trial_id, "step": step, "eval_accuracy": value})
                                 for step, value in steps]


def test_the_continuation_starts_from_the_chosen_models_best_trial_with_the_sentence_that_says_why():
    results = [_Result(DEEP, 8), _Result(SHALLOW, 16)]
    assert [(h.trial_id, h.evaluations) for h in exploit.histories(results, "eval_accuracy")] == \
        [("277f63be", DEEP.evaluations), ("5bc54160", SHALLOW.evaluations)]
    searched = Best("5bc54160", 214, "eval_accuracy", 0.694, {"model": "minilm-3"}, Path("/ckpt/5bc54160/214"), None)
    picked, why = exploit.model_to_train(searched, results, "eval_accuracy", "max")
    assert (picked.trial_id, picked.step, picked.model) == ("277f63be", 158, "minilm-6")
    assert why.startswith("models compared at equal training samples (1,264: eval_accuracy minilm-6 0.677, minilm-3")
    alone = [_Result(DEEP, 8)]
    deep_best = Best("277f63be", 158, "eval_accuracy", 0.677, {"model": "minilm-6"}, Path("/x"), None)
    assert exploit.model_to_train(deep_best, alone, "eval_accuracy", "max") == (deep_best, None)
