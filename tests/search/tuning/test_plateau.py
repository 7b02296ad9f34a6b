"""search.plateau_patience: under real Ray Tune, a trial whose best has not bettered for that many evaluations stops
(the sweep's own stoppers, fed by the trials' sink), the baseline trial never does, and the trial's MLflow run says
which ended how."""

from __future__ import annotations

import tempfile
from pathlib import Path

from finesweep.search.budget.plan import unplanned
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.search.tracking.tags import END_STATE_TAG
from finesweep.search.tuning.callbacks import PlateauStopper, TrialEndRecorder
from finesweep.search.tuning.context import TrialContext, planned_lengths
from finesweep.search.tuning.tuner import stoppers
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import BASELINE_KEY

# A small data set learnt early: the best (0.7) is reached at the 2nd evaluation; the 3rd ties it, the 4th falls short
# and the 5th ties again: the 3rd in a row not to better it. A later rise (0.8) is what a longer patience would see.
ACCURACIES = [0.5, 0.7, 0.7, 0.6, 0.7, 0.7, 0.8, 0.8]
EVERY = 10


def _trial(config):
    from finesweep.search.tuning.sink import TuneMlflowSink

    sink = TuneMlflowSink(Tracker(config["uri"]), config["run_id"], ("eval_accuracy", "max"))
    for number, accuracy in enumerate(ACCURACIES, start=1):
        checkpoint = Path(tempfile.mkdtemp())
        (checkpoint / "weights").write_text(str(number))
        sink.on_evaluation(EVERY * number, {"eval_accuracy": accuracy}, checkpoint)


def _sweep(**search) -> SweepConfig:
    return SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "x"}],
                                       "search": {"metric": "eval_accuracy", "mode": "max", **search}})


def test_a_trial_stops_at_its_plateau_and_the_baseline_trains_on(tmp_path):
    import ray
    from ray import tune

    from finesweep.search.tuning.ray_cluster import start_ray

    config = _sweep()
    assert config.search.plateau_patience == 3  # the default
    assert isinstance(stoppers(config, unplanned(config, 1), tmp_path), PlateauStopper)
    assert stoppers(_sweep(plateau_patience=None), unplanned(_sweep(), 1), tmp_path) is None
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment("s", tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    runs = {True: tracker.start_run(experiment, "baseline", {}, parent),
            False: tracker.start_run(experiment, "sampled", {}, parent)}
    context = TrialContext(sweep=config.model_dump(mode="json"), tokenized={}, label_names=None, micro_batches={},
                           eval_batches={}, tracking_uri=tracker.uri, experiment_id=experiment, parent_run_id=parent,
                           **planned_lengths(unplanned(config, 1)))
    recorder = TrialEndRecorder(tracker.uri, context, len(ACCURACIES))
    start_ray(None)
    try:
        space = {BASELINE_KEY: tune.grid_search([True, False]), "uri": tracker.uri,
                 "run_id": tune.sample_from(lambda spec: runs[spec.config[BASELINE_KEY]])}
        tuner = tune.Tuner(tune.with_resources(_trial, {"cpu": 1}), param_space=space,
                           tune_config=tune.TuneConfig(metric="eval_accuracy", mode="max"),
                           run_config=tune.RunConfig(name="plateau", storage_path=str(tmp_path), verbose=0,
                                                     stop=stoppers(config, unplanned(config, 1), tmp_path), callbacks=[recorder]))
        results = {r.config[BASELINE_KEY]: r.metrics for r in tuner.fit()}
    finally:
        ray.shutdown()
    assert results[False]["step"] == 5 * EVERY, "the 3rd evaluation in a row without a better best stops it"
    assert results[True]["step"] == len(ACCURACIES) * EVERY, "the baseline trains its whole recipe"
    ends = {baseline: tracker.client.get_run(run).data.tags[END_STATE_TAG] for baseline, run in runs.items()}
    assert ends == {True: "completed", False: f"plateaued_at_step_{5 * EVERY}"}
