"""Under real Ray Tune, with the sweep's own searcher and stoppers: once the trials' share could not pay a new trial's
first evaluation no trial starts, and a trial whose next evaluation would come after the share's end ends at its
last one, its MLflow run saying that the time budget stopped it. Either way the search ends before the share does."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from finesweep.search.budget.plan import unplanned
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.search.tracking.tags import END_STATE_TAG
from finesweep.search.tuning.callbacks import TrialEndRecorder
from finesweep.search.tuning.context import TrialContext, planned_lengths
from finesweep.search.budget.pace import TrialTimes
from finesweep.search.tuning.tuner import gated_searcher, stoppers
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import BASELINE_KEY

PERIOD = 2.0  # each evaluation period of the fake trials, in seconds
EVALUATIONS = 10  # a sampled trial's; the baseline makes 2 and ends
SHARE = 12.0  # the trials' share of the time budget
# The plan's times: a trial's first evaluation 8 s after its launch (a model's load, say), its periods as they run.
TIMES = {"m|fp32|full": TrialTimes(start=6.0, period=PERIOD)}


def _trial(config, uri, experiment, parent):
    from finesweep.search.tuning.sink import TuneMlflowSink

    tracker = Tracker(uri)
    sink = TuneMlflowSink(tracker, tracker.start_run(experiment, "trial", {}, parent), ("eval_loss", "min"))
    for number in range(1, (2 if config.get(BASELINE_KEY) else EVALUATIONS) + 1):
        time.sleep(PERIOD)
        checkpoint = Path(tempfile.mkdtemp())
        (checkpoint / "weights").write_text(str(number))
        sink.on_evaluation(10 * number, {"eval_loss": 1.0 / number}, checkpoint)


def test_no_trial_starts_too_late_and_none_runs_past_its_last_evaluation_in_the_share(tmp_path):
    import ray
    from ray import tune

    from finesweep.search.tuning.ray_cluster import start_ray

    config = SweepConfig.model_validate({
        "name": "s", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "x"}],
        "space": {"precision": ["fp32"], "method": ["full"]},
        "search": {"metric": "eval_loss", "mode": "min", "num_trials": 4, "max_concurrent_trials": 2,
                   "scheduler": "none", "plateau_patience": None, "time_budget_minutes": SHARE / 30,
                   "exploit": {"share": 0.5}}})
    plan = unplanned(config, 1)
    assert plan.trials_seconds == SHARE
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment("s", tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    context = TrialContext(sweep=config.model_dump(mode="json"), tokenized={}, label_names=None, micro_batches={},
                           eval_batches={}, tracking_uri=tracker.uri, experiment_id=experiment, parent_run_id=parent,
                           **planned_lengths(plan))
    recorder = TrialEndRecorder(tracker.uri, context, EVALUATIONS)
    start_ray(None)
    try:
        trainable = tune.with_parameters(_trial, uri=tracker.uri, experiment=experiment, parent=parent)
        searcher = gated_searcher(config, plan, ["fp32"], tmp_path / "share", TIMES)
        tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 0.5}), tune_config=tune.TuneConfig(
            metric="eval_loss", mode="min", search_alg=searcher, num_samples=4, max_concurrent_trials=2),
            run_config=tune.RunConfig(name="share", storage_path=str(tmp_path), verbose=0, callbacks=[recorder],
                                      stop=stoppers(config, plan, tmp_path / "share", TIMES)))
        results = list(tuner.fit())
        # As the sweep does (search/sweep.py): a trial that Tune's end of the whole search stopped in the middle of
        # a period (a loaded machine made it longer than the one it measured) has no completion event to tag it.
        recorder.close_unfinished("stopped_by_time_budget")
    finally:
        ray.shutdown()
    # The baseline ended after two periods, with less of the share left than a first evaluation's 8 s.
    assert len(results) == 2, [r.config for r in results]
    sampled = next(r for r in results if not r.config.get(BASELINE_KEY))
    step = sampled.metrics["step"]
    assert 10 <= step < 10 * EVALUATIONS
    assert tracker.client.get_run(sampled.metrics["mlflow_run_id"]).data.tags[END_STATE_TAG] == \
        f"stopped_by_time_budget_at_step_{step}"
