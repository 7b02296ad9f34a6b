"""The sweep's plots: read back from a real MLflow store, replayed through the sweep's space, logged as PNGs."""

from __future__ import annotations

from pathlib import Path

import pytest

from finesweep.search.budget.plan import unplanned
from finesweep.search.outputs.plots import log_sweep_plots, replay_study, trial_curves
from finesweep.search.probe.table import combination_key
from finesweep.search.tuning.context import planned_lengths
from finesweep.search.tuning.trainable import TrialContext, build_plan
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.search.tracking.tags import END_STATE_TAG, TRIAL_TAG
from finesweep.spaces import SweepConfig
from finesweep.spaces.space_config import FloatRange

PLOTS = {"optimization_history.png", "parallel_coordinate.png", "param_importances.png", "learning_curves.png"}
PRECISIONS = ["fp32", "bf16"]

# (sampled parameters, evaluations as (step, eval_accuracy)); the last trial failed before its first evaluation.
TRIALS = [
    ({"model": "tiny-a", "precision": "fp32", "method": "full", "effective_batch_size": 8,
      "learning_rate": 0.0042, "warmup_ratio": 0.1}, [(5, 0.41), (10, 0.55), (15, 0.62)]),
    ({"model": "tiny-b", "precision": "bf16", "method": "lora", "effective_batch_size": 16, "lora_r": 8,
      "lora_alpha": 32, "learning_rate": 0.019, "warmup_ratio": 0.02}, [(5, 0.47), (10, 0.71), (15, 0.66)]),
    ({"model": "tiny-a", "precision": "bf16", "method": "lora", "effective_batch_size": 8, "lora_r": 16,
      "lora_alpha": 16, "learning_rate": 0.0031, "warmup_ratio": 0.05}, [(5, 0.38)]),
    ({"model": "tiny-b", "precision": "fp32", "method": "full", "effective_batch_size": 16,
      "learning_rate": 0.011, "warmup_ratio": 0.08}, [(5, 0.52), (10, 0.6), (15, 0.64)]),
    ({"model": "tiny-a", "precision": "fp32", "method": "full", "effective_batch_size": 16,
      "learning_rate": 0.027, "warmup_ratio": 0.0}, []),
]


def _config(tmp_path: Path) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "plots", "seed": 3, "output_root": str(tmp_path),
        "data": {"path": "data.csv"},
        "models": [{"name": "tiny-a", "path": "a"}, {"name": "tiny-b", "path": "b"}],
        "space": {"learning_rate": {"low": 1e-3, "high": 3e-2, "log": True}, "effective_batch_size": [8, 16],
                  "precision": PRECISIONS, "method": ["full", "lora"], "warmup_ratio": {"low": 0.0, "high": 0.2}},
        "search": {"metric": "eval_accuracy", "mode": "max", "eval_every_steps": 5, "max_steps": 15},
    })


def _store(tmp_path: Path, config: SweepConfig, trials: list) -> tuple[Tracker, str, str]:
    """A real SQLite store with a parent run and one nested run per trial, logged the way trials log."""
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment(config.name, tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    context = TrialContext(sweep=config.model_dump(mode="json"), tokenized={"tiny-a": "ta", "tiny-b": "tb"},
                           label_names=["neg", "pos"], eval_batches={}, tracking_uri=tracker.uri,
                           experiment_id=experiment, parent_run_id=parent, **planned_lengths(unplanned(config, 1)),
                           micro_batches={combination_key(m, p, k): 8 for m in ("tiny-a", "tiny-b")
                                          for p in PRECISIONS for k in ("full", "lora")})
    for number, (params, evaluations) in enumerate(trials):
        run = tracker.start_run(experiment, f"trial-{number:05d}", {TRIAL_TAG: f"t{number:05d}"}, parent)
        tracker.log_params(run, build_plan({"weight_decay": 0.01, **params}, context, "out").params())
        for step, value in evaluations:
            tracker.log_metrics(run, {"eval_accuracy": value, "eval_loss": 1 - value}, step)
        tracker.set_tags(run, {END_STATE_TAG: "completed" if evaluations else "failed"})
        tracker.finish(run)
    return tracker, experiment, parent


def test_the_plots_are_pngs_on_the_parent_run(tmp_path):
    config = _config(tmp_path)
    tracker, experiment, parent = _store(tmp_path, config, TRIALS)
    warnings: list[str] = []
    paths = log_sweep_plots(config, tracker, experiment, parent, PRECISIONS, tmp_path / "plots", warnings.append)

    assert {p.name for p in paths} == PLOTS, warnings
    logged = {Path(a.path).name: a for a in tracker.client.list_artifacts(parent, "plots")}
    assert set(logged) == PLOTS
    local = Path(tracker.client.download_artifacts(parent, "plots", str(tmp_path / "downloaded")))
    for name in PLOTS:
        png = (local / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
        assert logged[name].file_size == len(png)


def test_the_replayed_study_holds_the_trials_with_the_space_types_and_best_values(tmp_path):
    config = _config(tmp_path)
    tracker, experiment, parent = _store(tmp_path, config, TRIALS)
    study = replay_study(config, trial_curves(tracker, experiment, parent, "eval_accuracy"), PRECISIONS)

    assert len(study.trials) == 4  # the failed trial never evaluated
    assert study.direction.name == "MAXIMIZE"
    assert study.best_value == pytest.approx(0.71)
    assert [t.value for t in study.trials] == pytest.approx([0.62, 0.71, 0.38, 0.64])  # best of each, not last
    lora = study.trials[1]
    assert lora.params == {"model": "tiny-b", "precision": "bf16", "method": "lora", "effective_batch_size": 16,
                           "lora_r": 8, "learning_rate": 0.019, "warmup_ratio": 0.02}  # alpha: 2r, no dimension
    assert lora.intermediate_values == {5: 0.47, 10: 0.71, 15: 0.66}
    assert "lora_r" not in study.trials[0].params  # conditional, as the space samples it
    assert set(study.trials[0].distributions) == {"model", "precision", "effective_batch_size", "method",
                                                  "learning_rate", "warmup_ratio"}  # weight_decay is fixed


def test_a_plot_that_would_mean_nothing_is_left_out_quietly_and_the_others_are_logged(tmp_path, caplog):
    """One trial: no parameter importances (a lone bar says nothing), said in the log file, not as a warning."""
    config = _config(tmp_path)
    tracker, experiment, parent = _store(tmp_path, config, TRIALS[:1])
    warnings: list[str] = []
    with caplog.at_level("INFO", logger="finesweep.search.outputs.plots"):
        paths = log_sweep_plots(config, tracker, experiment, parent, PRECISIONS, tmp_path / "plots", warnings.append)

    assert "optimization_history.png" in {p.name for p in paths}
    assert "param_importances.png" not in {p.name for p in paths}
    assert not warnings and "sweep plot param_importances left out: importances need at least 2 trials" in caplog.text
    assert {Path(a.path).name for a in tracker.client.list_artifacts(parent, "plots")} == {p.name for p in paths}


def test_a_plot_optuna_cannot_draw_is_skipped_with_a_warning(tmp_path, monkeypatch):
    import optuna.visualization.matplotlib as optuna_plots

    def broken(*args, **kwargs):
        raise RuntimeError("a release that draws differently")

    monkeypatch.setattr(optuna_plots, "plot_parallel_coordinate", broken)
    config = _config(tmp_path)
    tracker, experiment, parent = _store(tmp_path, config, TRIALS)
    warnings: list[str] = []
    paths = log_sweep_plots(config, tracker, experiment, parent, PRECISIONS, tmp_path / "plots", warnings.append)

    assert {p.name for p in paths} == PLOTS - {"parallel_coordinate.png"}
    assert warnings == ["sweep plot parallel_coordinate skipped: RuntimeError: a release that draws differently"]


def test_a_trial_outside_the_space_is_left_out_and_a_broken_store_never_raises(tmp_path):
    config = _config(tmp_path)
    tracker, experiment, parent = _store(tmp_path, config, TRIALS[:2])
    narrowed = config.model_copy(update={"space": config.space.model_copy(update={"model": ["tiny-a"]})})
    warnings: list[str] = []
    study = replay_study(narrowed, trial_curves(tracker, experiment, parent, "eval_accuracy"), PRECISIONS,
                         warnings.append)
    assert len(study.trials) == 1 and any("trial-00001" in w for w in warnings)

    warnings.clear()
    assert log_sweep_plots(config, tracker, experiment, "no-such-run", PRECISIONS, tmp_path / "p", warnings.append) == []
    assert warnings and "sweep plots" in warnings[0]


def test_a_searched_dropout_is_replayed_and_the_baseline_at_the_checkpoints_own_is_left_out_quietly(tmp_path, caplog):
    config = _config(tmp_path)
    config = config.model_copy(update={"space": config.space.model_copy(update={"dropout": FloatRange(low=0.0, high=0.1)})})
    baseline = ({**TRIALS[0][0], "baseline": True}, TRIALS[0][1])  # no dropout: the checkpoint's own
    sampled = [({**params, "dropout": rate}, evaluations)
               for (params, evaluations), rate in zip(TRIALS[1:4], (0.0, 0.04, 0.09))]
    tracker, experiment, parent = _store(tmp_path, config, [baseline, *sampled])
    warnings: list[str] = []
    with caplog.at_level("INFO", logger="finesweep"):
        study = replay_study(config, trial_curves(tracker, experiment, parent, "eval_accuracy"), PRECISIONS,
                             warnings.append)
    assert sorted(trial.params["dropout"] for trial in study.trials) == [0.0, 0.04, 0.09]
    assert not warnings and "trial-00000 left out" in caplog.text


def test_a_sweep_whose_only_evaluated_trial_is_the_baseline_off_the_space_says_so(tmp_path):
    """The budget paid for the baseline alone, at the checkpoint's dropout where the space searches dropout: the
    warning names why there is nothing to draw, not that nothing evaluated."""
    config = _config(tmp_path)
    dropout = config.space.model_copy(update={"dropout": FloatRange(low=0.0, high=0.1)})
    config = config.model_copy(update={"space": dropout})
    tracker, experiment, parent = _store(tmp_path, config, [({**TRIALS[0][0], "baseline": True}, TRIALS[0][1])])
    warnings: list[str] = []
    assert log_sweep_plots(config, tracker, experiment, parent, PRECISIONS, tmp_path / "plots", warnings.append) == []
    assert warnings == ["sweep plots skipped: no evaluated trial is a point of the space (the baseline's recipe need "
                        "not be one)"]
