"""A trial is judged by its best evaluation so far (search/selection/best.py BEST_SO_FAR): reported with every evaluation,
carried across a resume, and what Optuna is told when the trial ends (the export picks over all evaluations too)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from finesweep.search.budget.plan import unplanned
from finesweep.search.selection.best import BEST_SO_FAR, CHECKPOINT_SCORE, SINCE_BEST, checkpoint_score
from finesweep.search.tuning.sink import TuneMlflowSink
from finesweep.search.tuning.trainable import sink_for
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.spaces import SweepConfig

MINIMAL = {"name": "s", "data": {"path": "data.csv"}, "models": [{"name": "m", "path": "model"}]}


class RecordingSink(TuneMlflowSink):
    """The trials' sink, logging to a real MLflow store; what it would report to Tune is kept in `reports`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reports: list[dict] = []

    def report(self, result, checkpoint_dir):
        self.reports.append(result)


def _trial_run(tmp_path: Path) -> tuple[Tracker, str]:
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment("s", tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    return tracker, tracker.start_run(experiment, "trial-00000", {}, parent)


@pytest.mark.parametrize("metric, mode, values, expected, since", [
    ("eval_loss", "min", [0.9, 0.7, math.nan, 0.8], [0.9, 0.7, 0.7, 0.7], [0, 0, 1, 2]),
    ("eval_accuracy", "max", [math.nan, 0.6, 0.8, 0.8], [math.nan, 0.6, 0.8, 0.8], [1, 0, 0, 1]),  # a tie: no better
])
def test_each_evaluation_reports_the_trials_best_so_far_beside_its_own_value(tmp_path, metric, mode, values, expected,
                                                                             since):
    tracker, run = _trial_run(tmp_path)
    sink = RecordingSink(tracker, run, (metric, mode))
    for number, value in enumerate(values, start=1):
        sink.on_evaluation(10 * number, {metric: value}, tmp_path)
    reported = [r[BEST_SO_FAR] for r in sink.reports]
    assert [round(v, 6) if math.isfinite(v) else "nan" for v in reported] == \
           [round(v, 6) if math.isfinite(v) else "nan" for v in expected]
    assert [r[SINCE_BEST] for r in sink.reports] == since  # what search.plateau_patience stops a trial at
    # the checkpoint is still ranked by its own evaluation, not by the running best
    assert sink.reports[-1][CHECKPOINT_SCORE] == checkpoint_score(values[-1], 40, mode)


def test_a_resumed_trial_starts_from_the_best_evaluation_in_its_checkpoint(tmp_path):
    tracker, run = _trial_run(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    history = [{"loss": 1.2, "step": 5}, {"eval_loss": 0.60, "step": 10}, {"eval_loss": 0.65, "step": 20}]
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 20, "log_history": history}))
    sink = sink_for(SimpleNamespace(resume_from=str(checkpoint)), tracker, run, ("eval_loss", "min"), RecordingSink)
    sink.on_evaluation(30, {"eval_loss": 0.62}, tmp_path)
    assert sink.reports[0][BEST_SO_FAR] == 0.60  # from before the restart: the trial's best checkpoint is still step 10
    assert sink.reports[0][SINCE_BEST] == 2  # steps 20 and 30 have not bettered it: a restart does not reset the count


def test_optuna_is_told_the_trials_best_evaluation_not_its_last(tmp_path):
    """The sweep's searcher, driven through Ray's Searcher interface as Tune drives it, with the sink's reports."""
    from finesweep.search.tuning.ray_compat import optuna_study_of
    from finesweep.search.tuning.samplers import make_searcher

    config = SweepConfig.model_validate({**MINIMAL, "space": {"precision": ["fp32"]},
                                         "search": {"metric": "eval_loss", "mode": "min", "num_trials": 2}})
    searcher = make_searcher(config, unplanned(config, 1), ["fp32"])
    tracker, run = _trial_run(tmp_path)
    sink = RecordingSink(tracker, run, ("eval_loss", "min"))
    assert searcher.suggest("t1")["model"] == "m"
    for number, value in enumerate([0.9, 0.5, 0.7], start=1):
        sink.on_evaluation(10 * number, {"eval_loss": value}, tmp_path)
        searcher.on_trial_result("t1", {**sink.reports[-1], "training_iteration": number})
    searcher.on_trial_complete("t1", sink.reports[-1])
    told = optuna_study_of(searcher).trials[0]  # the study the searcher asks and tells (Ray keeps it there)
    assert told.value == 0.5 and told.intermediate_values == {1: 0.9, 2: 0.5, 3: 0.5}
