"""Speed against quality: the Pareto front over trials, the export rule (search.pick), the multi-objective searcher
under real Ray Tune, and a real sweep with a second objective through the CLI."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from finesweep.search.budget.plan import unplanned
from finesweep.search.selection.best import BEST_SO_FAR, Best, best_of
from finesweep.search.selection.pareto import (THROUGHPUT, TrialPoint, dominates, pareto_front, pick_point, search_objectives,
                                     trial_points, within)
from finesweep.spaces import SweepConfig, SweepFileError, load

MINIMAL = {"name": "s", "data": {"path": "data.csv"}, "models": [{"name": "m", "path": "model"}]}


def point(trial_id: str, value: float, throughput: float, step: int = 10) -> TrialPoint:
    best = Best(trial_id=trial_id, step=step, metric="acc", value=value, params={"model": "m"},
                checkpoint_dir=Path(f"/ckpt/{trial_id}/{step}"), mlflow_run_id=f"run-{trial_id}")
    return TrialPoint(best, throughput)


def ids(points) -> list[str]:
    return [p.trial_id for p in points]


# --- the front ---------------------------------------------------------------------------------------------------

def test_the_front_keeps_the_undominated_trials_fastest_first():
    points = [point("slow-good", 0.90, 10.0), point("fast-bad", 0.70, 40.0), point("middle", 0.80, 20.0),
              point("dominated", 0.75, 15.0), point("worst", 0.60, 5.0)]
    assert ids(pareto_front(points, "max")) == ["fast-bad", "middle", "slow-good"]


def test_in_min_mode_a_lower_metric_is_better():
    points = [point("low-loss-slow", 0.2, 10.0), point("high-loss-fast", 0.9, 50.0), point("dominated", 0.5, 8.0),
              point("high-loss-slow", 0.9, 10.0)]
    assert ids(pareto_front(points, "min")) == ["high-loss-fast", "low-loss-slow"]
    assert dominates(points[0], points[3], "min") and not dominates(points[3], points[0], "min")


def test_ties_on_one_objective_are_decided_by_the_other_and_equal_points_both_stay():
    same_value = [point("a", 0.8, 10.0), point("b", 0.8, 20.0)]
    assert ids(pareto_front(same_value, "max")) == ["b"]  # as good, and faster
    twins = [point("a", 0.8, 20.0), point("b", 0.8, 20.0)]
    assert ids(pareto_front(twins, "max")) == ["a", "b"]  # neither dominates the other
    assert not dominates(twins[0], twins[1], "max")


def test_empty_and_single_point_fronts():
    assert pareto_front([], "max") == []
    assert ids(pareto_front([point("only", 0.5, 1.0)], "min")) == ["only"]


# --- the pick rule ----------------------------------------------------------------------------------------------

def test_fastest_within_picks_the_fastest_trial_close_enough_to_the_best():
    points = [point("best", 0.90, 10.0), point("close-fast", 0.895, 30.0), point("far-fastest", 0.80, 90.0)]
    assert pick_point(points, "max", "fastest_within", 0.01).trial_id == "close-fast"
    assert pick_point(points, "max", "fastest_within", 0.0).trial_id == "best"
    assert pick_point(points, "max", "fastest_within", 0.2).trial_id == "far-fastest"
    assert pick_point(points, "max", "best_metric", 0.2).trial_id == "best"


def test_the_tolerance_is_inclusive_despite_float_round_off():
    assert 0.9 - 0.89 > 0.01  # the subtraction rounds up
    assert within(0.89, 0.9, 0.01, "max") and not within(0.889, 0.9, 0.01, "max")
    assert within(0.31, 0.3, 0.01, "min") and not within(0.311, 0.3, 0.01, "min")
    points = [point("best", 0.9, 10.0), point("edge", 0.89, 20.0)]
    assert pick_point(points, "max", "fastest_within", 0.01).trial_id == "edge"


def test_fastest_within_in_min_mode():
    points = [point("lowest-loss", 0.30, 5.0), point("close", 0.32, 12.0), point("fast-but-worse", 0.40, 50.0)]
    assert pick_point(points, "min", "fastest_within", 0.05).trial_id == "close"
    assert pick_point(points, "min", "best_metric", 0.05).trial_id == "lowest-loss"


def test_pick_ties_go_to_the_better_value_then_the_earlier_step_then_the_earlier_trial():
    same_speed = [point("best", 0.90, 20.0, step=30), point("close", 0.895, 20.0, step=10)]
    assert pick_point(same_speed, "max", "fastest_within", 0.01).trial_id == "best"
    same_both = [point("late", 0.90, 20.0, step=30), point("early", 0.90, 20.0, step=10)]
    assert pick_point(same_both, "max", "fastest_within", 0.01).trial_id == "early"
    assert pick_point(same_both, "max", "best_metric", 0.0).trial_id == "early"
    twins = [point("first", 0.90, 20.0), point("second", 0.90, 20.0)]
    assert pick_point(twins, "max", "best_metric", 0.0).trial_id == "first"
    assert pick_point([], "max", "fastest_within", 0.01) is None
    with pytest.raises(ValueError, match="unknown pick rule"):
        pick_point(twins, "max", "cheapest", 0.0)


def test_the_front_over_floats_is_exact_with_ties_and_near_equal_values():
    """A hand-computed front: comparisons are exact (no tolerance on the front, unlike `within`), so a point a hair
    better on one objective and equal on the other dominates; bit-identical twins both stay; a point tied on speed
    but worse in value, or worse on both, is out."""
    almost = 10.0 + 1e-12  # a hair faster than 10.0
    points = [point("slow-best", 0.9, 10.0), point("slow-best-a-hair-faster", 0.9, almost),
              point("fast", 0.1 + 0.2, 50.0), point("fast-a-hair-worse", 0.3, 50.0),  # 0.1 + 0.2 > 0.3 in floats
              point("twin-1", 0.7, 20.0), point("worse-at-twin-speed", 0.7 - 1e-12, 20.0), point("twin-2", 0.7, 20.0),
              point("middle", 0.5, 30.0), point("below-middle", 0.45, 25.0)]
    assert ids(pareto_front(points, "max")) == ["fast", "middle", "twin-1", "twin-2", "slow-best-a-hair-faster"]
    # In min mode, the same plane mirrored on the metric: the lowest values are best.
    mirrored = [point(p.trial_id, -p.value, p.throughput) for p in points]
    assert ids(pareto_front(mirrored, "min")) == ["fast", "middle", "twin-1", "twin-2", "slow-best-a-hair-faster"]


# --- trial points from Tune results -------------------------------------------------------------------------

def result(trial_id: str, evaluations: list[tuple[int, float]], throughput: float | None):
    checkpoints = [(SimpleNamespace(path=f"/ckpt/{trial_id}/{step}"),
                    {"step": step, "acc": value, "trial_id": trial_id, "mlflow_run_id": f"run-{trial_id}"})
                   for step, value in evaluations]
    last = {"acc": evaluations[-1][1], THROUGHPUT: throughput} if evaluations else {}
    return SimpleNamespace(best_checkpoints=checkpoints, metrics=last, config={"model": "m", "learning_rate": 1e-3})


def test_each_trial_is_its_best_evaluation_and_its_last_throughput():
    results = [result("a", [(10, 0.6), (20, 0.9), (30, 0.9)], 12.5), result("b", [(10, 0.7)], 30.0),
               result("nan", [(10, float("nan"))], 5.0), result("no-speed", [(10, 0.99)], None),
               result("none", [], None)]
    points = trial_points(results, "acc", "max")
    assert [(p.trial_id, p.value, p.best.step, p.throughput) for p in points] == [("a", 0.9, 20, 12.5), ("b", 0.7, 10, 30.0)]
    assert str(points[0].best.checkpoint_dir) == "/ckpt/a/20"


# --- configuration ------------------------------------------------------------------------------------------------

def test_objectives_are_the_metric_alone_or_both_with_their_modes():
    plain = SweepConfig.model_validate(MINIMAL)  # the metric as each trial's best so far
    assert search_objectives(plain.search) == (BEST_SO_FAR, "max")  # a classifier: accuracy
    both = SweepConfig.model_validate({**MINIMAL, "search": {"second_objective": "throughput", "metric": "eval_f1_macro",
                                                             "mode": "max", "pick": "fastest_within"}})
    assert search_objectives(both.search) == ([BEST_SO_FAR, THROUGHPUT], ["max", "max"])
    assert both.search.pick_tolerance == 0.01
    again = SweepConfig.model_validate(both.model_dump(mode="json"))  # resume and every trial re-validate the dump
    assert again == both and SweepConfig.model_validate(plain.model_dump(mode="json")) == plain


@pytest.mark.parametrize("search, message", [
    ("{pick: fastest_within}", "search: pick: fastest_within needs a speed to compare, but second_objective is none"),
    ("{pick_tolerance: 0.05}", "search: pick_tolerance applies only to pick: fastest_within, but got pick_tolerance=0.05 "
                               "with pick: best_metric"),
    ("{second_objective: throughput, metric: train_samples_per_second_so_far}",
     "second_objective: throughput maximises train_samples_per_second_so_far, which is already the metric"),
    ("{second_objective: cost}", "search.second_objective: Input should be 'none' or 'throughput'"),
    ("{second_objective: throughput, pick: fastest_within, pick_tolerance: -1}", "search.pick_tolerance: Input should be greater than or equal to 0"),
])
def test_bad_combinations_are_one_clear_sweep_file_error(tmp_path, search, message):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: s\ndata: {path: data.csv}\nmodels: [{name: m, path: model}]\nsearch: " + search + "\n")
    with pytest.raises(SweepFileError) as caught:
        load(path)
    assert message in str(caught.value)


# --- the multi-objective searcher under real Ray Tune ------------------------------------------------------

def _fake_trial(params):
    """Three evaluations with checkpoints; quality from the learning rate, speed from the batch (each trial's own)."""
    from ray import tune

    from finesweep.search.selection.best import CHECKPOINT_SCORE, checkpoint_score

    speed = 100.0 / params["effective_batch_size"] + params["learning_rate"]
    values = []
    for step in (5, 10, 15):
        values.append(params["learning_rate"] * 10 + (0.1 if step == 10 else 0.0))  # the best is the middle one
        with tempfile.TemporaryDirectory() as folder:
            tune.report({"eval_accuracy": values[-1], "step": step, THROUGHPUT: speed * step, "mlflow_run_id": "r",
                         CHECKPOINT_SCORE: checkpoint_score(values[-1], step, "max"),
                         BEST_SO_FAR: best_of(values, "max")},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def test_optuna_is_told_each_trials_metric_and_throughput_as_two_objectives(tmp_path):
    """The sweep's own searcher, scheduler and checkpoint config around a fake trial: Tune's metric stays the primary
    (ASHA's), Optuna's study has two directions, and each of its trials holds that trial's best metric (not its last)
    and its own throughput."""
    import optuna
    import ray
    from ray import tune

    from finesweep.search.tuning.ray_compat import optuna_study_of
    from finesweep.search.tuning.samplers import make_scheduler, make_searcher
    from finesweep.search.tuning.tuner import checkpoint_config
    from finesweep.search.tuning.ray_cluster import start_ray

    config = SweepConfig.model_validate({**MINIMAL, "space": {"effective_batch_size": [4, 8, 16], "precision": ["fp32"]},
                                         "search": {"metric": "eval_accuracy", "mode": "max", "second_objective": "throughput",
                                                    "num_trials": 3, "eval_every_steps": 5, "max_steps": 15,
                                                    "baseline": "off"}})  # every trial a sample of the space
    searcher = make_searcher(config, unplanned(config, 1), ["fp32"])
    start_ray(None)
    try:
        tuner = tune.Tuner(tune.with_resources(_fake_trial, {"cpu": 1}), tune_config=tune.TuneConfig(
            metric=BEST_SO_FAR, mode="max", search_alg=searcher, scheduler=make_scheduler(config, unplanned(config, 1)), num_samples=3),
            run_config=tune.RunConfig(name="mo", storage_path=str(tmp_path), verbose=0,
                                      checkpoint_config=checkpoint_config(config)))
        results = tuner.fit()
    finally:
        ray.shutdown()
    study = optuna_study_of(searcher)  # Tune drives the searcher it was given (wrapped, not copied)
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE] * 2
    told = {round(t.params["learning_rate"], 12): t.values for t in study.trials if t.values}
    assert len(told) == 3
    for r in results:
        last = r.metrics
        best = r.config["learning_rate"] * 10 + (0.1 if last["step"] >= 10 else 0.0)
        assert told[round(r.config["learning_rate"], 12)] == [best, last[THROUGHPUT]]
    points = trial_points(results, "eval_accuracy", "max")
    assert len(points) == 3
    for p, r in zip(points, results):
        assert p.best.step == min(10, r.metrics["step"])  # the middle evaluation is each trial's best (if reached)
        assert p.throughput == r.metrics[THROUGHPUT] and Path(p.best.checkpoint_dir).is_dir()


# --- a real sweep through the CLI -----------------------------------------------------------------------------

SWEEP = """
name: speedy
seed: 3
output_root: runs
data:
  path: data.csv
  splits: {train: 0.7, validation: 0.15, test: 0.15}
models:
  - {name: tiny-a, path: model}
  - {name: tiny-b, path: model, config_overrides: {num_hidden_layers: 1}}
space:
  learning_rate: {low: 3.0e-3, high: 3.0e-2, log: true}
  effective_batch_size: [4, 16]
  precision: [fp32]
search:
  num_trials: 3
  metric: eval_accuracy
  mode: max
  eval_every_steps: 5
  max_steps: 10
  scheduler: none
  second_objective: throughput
  pick: fastest_within
  pick_tolerance: 0.05
resources: {cpus_per_trial: 1, memory_budget: 4GiB}
export: {quantization: [none], register_model: false}
"""


@pytest.mark.slow  # about 70 s: the front, the pick and Optuna's two objectives are tested above without a sweep
def test_a_sweep_with_a_second_objective_logs_the_front_and_exports_the_trial_the_rule_names(tmp_path):
    from mlflow import MlflowClient

    from tests import tiny
    from tests.sweeps import finesweep

    tiny.classification_folder(tmp_path, SWEEP)
    done = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Pareto front" in done.stdout and "Pick: trial" in done.stdout

    sweep_dir = tmp_path / "runs" / "speedy"
    state = json.loads((sweep_dir / "sweep-state.json").read_text())
    client = MlflowClient(f"sqlite:///{sweep_dir / 'mlflow.db'}")
    parent = client.get_run(state["parent_run_id"])
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "pareto.json", str(tmp_path))).read_text())
    assert logged["points"] and logged["front"] and logged["rule"] == "fastest_within"
    assert "plots/pareto_front.png" in {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}

    # The rule applied afresh to what the tracking store holds (each trial's evaluations and its last throughput)
    # names the trial that was exported.
    trials = client.search_runs([state["experiment_id"]],
                                filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    stored = []
    for run in trials:
        history = sorted(client.get_metric_history(run.info.run_id, "eval_accuracy"), key=lambda m: (-m.value, m.step))
        speed = sorted(client.get_metric_history(run.info.run_id, THROUGHPUT), key=lambda m: m.step)
        if history and speed:
            stored.append(point(run.data.tags["finesweep.trial_id"], history[0].value, speed[-1].value,
                                step=history[0].step))
    assert len(stored) == len(logged["points"]) == 3
    assert sorted(ids(pareto_front(stored, "max"))) == sorted(logged["front"])
    chosen = pick_point(stored, "max", "fastest_within", 0.05)
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["best"]["trial_id"] == chosen.trial_id == logged["pick"]["trial_id"]
    assert summary["best"]["step"] == chosen.best.step
    assert parent.data.tags["finesweep.pick"] == f"trial-{chosen.trial_id} step {chosen.best.step}"
    assert parent.data.tags["finesweep.pick_rule"].startswith("fastest_within")
    assert json.loads((sweep_dir / "export" / "metrics.json").read_text())  # the export happened
