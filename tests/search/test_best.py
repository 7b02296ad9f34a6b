"""The best checkpoint is the best evaluation over all trials, ties to the earlier step."""

from __future__ import annotations

from types import SimpleNamespace

from finesweep.search.best import pick_best


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

    from finesweep.search.best import Best

    best = pick_best([result("a", [(10, 0.6), (20, 0.9)])], "acc", "max")
    assert Best.from_dict(json.loads(json.dumps(best.as_dict()))) == best
