"""Resume after a crash between Tune's state saves: trials the saved state does not know leave no open MLflow runs."""

from __future__ import annotations

import json
from pathlib import Path

from finesweep.search.trainable import TrialContext
from finesweep.search.tracking import END_STATE_TAG, TRIAL_TAG, Tracker, default_tracking_uri
from finesweep.search.recovery import drop_runs_of_unsaved_trials, saved_trials


def _saved_state(experiment_dir: Path, trial_ids: list[str]) -> None:
    """An experiment state holding `trial_ids` as RUNNING, in the fields Tune 2.60 writes (the ones read back)."""
    experiment_dir.mkdir(parents=True)
    trial_data = [[json.dumps({"trial_id": t, "status": "RUNNING", "relative_logdir": f"trial-{t}"}),
                   json.dumps({"last_result": {"checkpoint_dir_name": "checkpoint_000001"}})] for t in trial_ids]
    (experiment_dir / "experiment_state-2026-11-22_10-00-00.json").write_text(json.dumps({"trial_data": trial_data}))


def test_runs_of_trials_unknown_to_the_saved_state_are_deleted_or_closed(tmp_path):
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment("s", tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    runs = {t: tracker.start_run(experiment, f"trial-{t}", {TRIAL_TAG: t}, parent) for t in ("saved", "bare", "evaluated")}
    tracker.log_metrics(runs["evaluated"], {"eval_loss": 0.9}, 5)
    _saved_state(tmp_path / "tune", ["saved"])
    assert [t.trial_id for t in saved_trials(tmp_path / "tune")] == ["saved"]
    context = TrialContext(sweep={}, tokenized={}, label_names=None, micro_batches={}, eval_batches={},
                           tracking_uri=tracker.uri, experiment_id=experiment, parent_run_id=parent)

    assert sorted(drop_runs_of_unsaved_trials(tracker, context, tmp_path / "tune")) == ["bare", "evaluated"]
    left = {r.data.tags[TRIAL_TAG]: r for r in tracker.trial_runs(experiment, parent)}
    assert set(left) == {"saved", "evaluated"}  # the run with no evaluation is gone (soft-deleted)
    assert left["saved"].info.status == "RUNNING"  # Tune resumes it
    assert left["evaluated"].info.status == "FAILED" and left["evaluated"].data.tags[END_STATE_TAG] == "lost_in_crash"
