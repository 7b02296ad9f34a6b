"""The best checkpoint is the best evaluation over all trials, ties to the earlier step."""

from __future__ import annotations

import json
from types import SimpleNamespace

from finesweep.search.selection.best import kept_checkpoints, pick_best, weights_whole


def result(trial_id: str, evaluations: list[tuple[int, float]], config: dict | None = None):
    checkpoints = [(SimpleNamespace(path=f"/ckpt/{trial_id}/{step}"), {"step": step, "acc": value, "trial_id": trial_id,
                                                                     "mlflow_run_id": f"run-{trial_id}"})
                   for step, value in evaluations]
    return SimpleNamespace(best_checkpoints=checkpoints, config=config or {"model": "m", "learning_rate": 1e-4, "other": 1})


def test_the_best_of_all_evaluations_wins_not_the_last_of_each_trial():
    results = [result("a", [(10, 0.6), (20, 0.9), (30, 0.7)]), result("b", [(10, 0.8), (20, 0.85)])]
    best = pick_best(results, "acc", "max")
    assert (best.trial_id, best.step, best.value) == ("a", 20, 0.9)
    assert str(best.checkpoint_dir) == "/ckpt/a/20"
    assert best.params == {"model": "m", "learning_rate": 1e-4}
    assert best.mlflow_run_id == "run-a"


def test_minimising_and_ties_go_to_the_earlier_step():
    results = [result("a", [(30, 0.5)]), result("b", [(10, 0.5), (20, 0.7)])]
    best = pick_best(results, "acc", "min")
    assert (best.trial_id, best.step) == ("b", 10)


def test_nan_and_missing_values_are_ignored_and_nothing_gives_none():
    results = [result("a", [(10, float("nan"))]), SimpleNamespace(best_checkpoints=None, config={})]
    assert pick_best(results, "acc", "max") is None
    assert pick_best([result("a", [(10, 0.3)])], "missing_metric", "max") is None


def test_best_survives_summary_json():
    import json

    from finesweep.search.selection.best import Best

    best = pick_best([result("a", [(10, 0.6), (20, 0.9)])], "acc", "max")
    assert Best.from_dict(json.loads(json.dumps(best.as_dict()))) == best


def test_checkpoint_score_orders_by_metric_then_earlier_step():
    from finesweep.search.selection.best import checkpoint_score

    assert checkpoint_score(0.9, 400, "max") > checkpoint_score(0.8, 10, "max")
    assert checkpoint_score(0.4, 400, "min") > checkpoint_score(0.5, 10, "min")
    assert checkpoint_score(0.5, 10, "min") > checkpoint_score(0.5, 20, "min")
    assert checkpoint_score(250.0, 10, "max") > checkpoint_score(250.0, 11, "max")  # large values tie-break too
    assert checkpoint_score(0.500002, 10**6, "max") > checkpoint_score(0.5, 1, "max")


def _tied_trial(config):
    """Five evaluations with the same metric value: 0.5 at steps 10..50, a checkpoint with each."""
    import tempfile

    from ray import tune

    from finesweep.search.selection.best import CHECKPOINT_SCORE, checkpoint_score

    for step in range(10, 60, 10):
        with tempfile.TemporaryDirectory() as folder:
            metrics = {"eval_accuracy": 0.5, "step": step, "trial_id": tune.get_context().get_trial_id()}
            tune.report({**metrics, CHECKPOINT_SCORE: checkpoint_score(0.5, step, "max")},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def test_tune_keeps_the_earliest_of_tied_checkpoints(tmp_path):
    """Real Tune with the sweep's CheckpointConfig: of five tied evaluations it keeps the first (ranking by the
    bare metric, Tune keeps the last of equal scores), so the winner pick_best names still exists on disk."""
    import os

    import ray
    from ray import tune

    from finesweep.search.tuning.tuner import checkpoint_config
    from finesweep.search.tuning.ray_cluster import start_ray
    from finesweep.spaces import SweepConfig

    config = SweepConfig.model_validate({"name": "tie", "data": {"path": "x.csv"}, "models": [{"name": "m", "path": "m"}],
                                         "search": {"metric": "eval_accuracy", "mode": "max", "keep_checkpoints": 1}})
    start_ray(None)
    try:
        tuner = tune.Tuner(tune.with_resources(_tied_trial, {"cpu": 1}), run_config=tune.RunConfig(
            name="tie", storage_path=str(tmp_path), checkpoint_config=checkpoint_config(config), verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    kept = sorted(metrics["step"] for _, metrics in results[0].best_checkpoints)
    assert kept == [10]
    best = pick_best(results, "eval_accuracy", "max")
    assert best.step == 10 and os.path.isdir(best.checkpoint_dir)
    # The same trial as Tune leaves it when the budget ends between a result and the save it schedules after it:
    # the checkpoint in storage and the result logged, nothing registered. It is read back from the trial's folder.
    unregistered = SimpleNamespace(best_checkpoints=[], path=results[0].path, metrics=results[0].metrics,
                                   config=results[0].config)
    recovered = pick_best([unregistered], "eval_accuracy", "max")
    assert (recovered.step, recovered.checkpoint_dir, recovered.trial_id) == (10, best.checkpoint_dir, best.trial_id)
    empty = tmp_path / "no-checkpoint"
    empty.mkdir()
    assert pick_best([SimpleNamespace(best_checkpoints=[], path=str(empty), metrics={}, config={})], "acc", "max") is None


def test_a_checkpoint_saved_just_before_the_budget_stopped_its_trial_competes_with_the_trainers_own_record(tmp_path):
    """The budget's end came between a trial's save and its result: a checkpoint in storage, result.json empty
    (seen on a CPU: the sweep then stopped with Ray's KeyError). The Trainer's trainer_state.json in the checkpoint
    holds that evaluation; a checkpoint without one has nothing to compete with."""
    trial = tmp_path / "trial-d18a4cce"
    (trial / "checkpoint_000001").mkdir(parents=True)
    (trial / "result.json").write_text("")
    state = {"global_step": 235, "log_history": [{"loss": 0.7, "step": 200}, {"eval_accuracy": 0.61, "step": 200},
                                                 {"loss": 0.6, "step": 235},
                                                 {"eval_accuracy": 0.77, "eval_loss": 0.58, "step": 235}]}
    (trial / "checkpoint_000000").mkdir()
    (trial / "checkpoint_000000" / "trainer_state.json").write_text(json.dumps(state))
    stopped = SimpleNamespace(best_checkpoints=[], path=str(trial), metrics={}, config={"model": "m", "learning_rate": 1e-4})
    best = pick_best([stopped], "eval_accuracy", "max")
    assert (best.trial_id, best.step, best.value) == ("d18a4cce", 235, 0.77)
    assert best.checkpoint_dir == trial / "checkpoint_000000" and best.params == {"model": "m", "learning_rate": 1e-4}


def test_a_later_checkpoint_tune_never_registered_competes_beside_the_registered_ones(tmp_path):
    """Tune registered the trial's first checkpoint; the budget ended between the second's save and its result, so
    only the files and the Trainer's record hold it (seen on a CPU: the winner went on from step 136 at 0.706 with
    step 272 at 0.759 on disk). A folder without an evaluation of its own step adds nothing."""
    trial = tmp_path / "trial-9c4994da"
    first, second, bare = (trial / f"checkpoint_00000{n}" for n in range(3))
    for folder in (first, second, bare):
        folder.mkdir(parents=True)
    (trial / "result.json").write_text("")
    state = {"global_step": 272, "log_history": [{"eval_accuracy": 0.706, "step": 136},
                                                 {"eval_accuracy": 0.759, "step": 272}]}
    (second / "trainer_state.json").write_text(json.dumps(state))
    (bare / "trainer_state.json").write_text(json.dumps({"global_step": 300, "log_history": []}))
    registered = (SimpleNamespace(path=str(first)), {"step": 136, "eval_accuracy": 0.706, "trial_id": "9c4994da"})
    stopped = SimpleNamespace(best_checkpoints=[registered], path=str(trial), metrics={}, config={"model": "m"})
    best = pick_best([stopped], "eval_accuracy", "max")
    assert (best.trial_id, best.step, best.value, best.checkpoint_dir) == ("9c4994da", 272, 0.759, second)
    assert len(kept_checkpoints(stopped)) == 2


def test_a_checkpoint_whose_weights_were_cut_mid_copy_does_not_compete(tmp_path):
    """A trial stopped while its last checkpoint was copied into storage: trainer_state.json whole, model.safetensors
    cut short (the export then failed to load it). Only checkpoints whose weights are whole compete."""
    import numpy
    from safetensors.numpy import save_file

    trial = tmp_path / "trial-39044167"
    whole, cut = trial / "checkpoint_000000", trial / "checkpoint_000001"
    for folder, step, accuracy in ((whole, 120, 0.718), (cut, 1034, 0.798)):
        folder.mkdir(parents=True)
        save_file({"weight": numpy.ones((64, 64), dtype=numpy.float32)}, str(folder / "model.safetensors"))
        state = {"global_step": step, "log_history": [{"eval_accuracy": accuracy, "step": step}]}
        (folder / "trainer_state.json").write_text(json.dumps(state))
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (trial / "result.json").write_text("")
    stopped = SimpleNamespace(best_checkpoints=[], path=str(trial), metrics={}, config={"model": "m"})
    best = pick_best([stopped], "eval_accuracy", "max")
    assert (best.step, best.checkpoint_dir) == (120, whole)
    assert weights_whole(whole) and not weights_whole(cut)
