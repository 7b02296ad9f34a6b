"""Resume after a crash between Tune's state saves: trials the saved state does not know leave no open MLflow runs,
a trial whose saved checkpoint Tune deleted resumes from its newest whole one, one whose checkpoint Tune had not
registered yet is given its most trained whole one, and state files the crash cut short are set aside."""

from __future__ import annotations

import json
from pathlib import Path

from finesweep.search.tuning.trainable import TrialContext
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.search.tracking.tags import END_STATE_TAG, TRIAL_TAG
from finesweep.search.tuning.recovery import drop_runs_of_unsaved_trials, saved_trials


def _saved_state(experiment_dir: Path, trial_ids: list[str], finished: tuple[str, ...] = (),
                 session: str = "2026-11-22_10-00-00") -> Path:
    """An experiment state holding `trial_ids` as RUNNING (TERMINATED where `finished`), in the fields Tune 2.60
    writes (the ones read back)."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    trial_data = [[json.dumps({"trial_id": t, "status": "TERMINATED" if t in finished else "RUNNING",
                               "relative_logdir": f"trial-{t}"}),
                   json.dumps({"last_result": {"checkpoint_dir_name": "checkpoint_000001"}})] for t in trial_ids]
    path = experiment_dir / f"experiment_state-{session}.json"
    path.write_text(json.dumps({"trial_data": trial_data}))
    return path


def test_runs_of_trials_unknown_to_the_saved_state_are_deleted_or_closed(tmp_path):
    tracker = Tracker(default_tracking_uri(tmp_path))
    experiment = tracker.experiment("s", tmp_path / "mlartifacts")
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    runs = {t: tracker.start_run(experiment, f"trial-{t}", {TRIAL_TAG: t}, parent) for t in ("saved", "bare", "evaluated")}
    tracker.log_metrics(runs["evaluated"], {"eval_loss": 0.9}, 5)
    _saved_state(tmp_path / "tune", ["saved"])
    assert [t.trial_id for t in saved_trials(tmp_path / "tune")] == ["saved"]
    context = TrialContext(sweep={}, tokenized={}, label_names=None, micro_batches={}, eval_batches={},
                           tracking_uri=tracker.uri, experiment_id=experiment, parent_run_id=parent, max_steps=1,
                           eval_every_steps=1)

    assert sorted(drop_runs_of_unsaved_trials(tracker, context, tmp_path / "tune")) == ["bare", "evaluated"]
    left = {r.data.tags[TRIAL_TAG]: r for r in tracker.trial_runs(experiment, parent)}
    assert set(left) == {"saved", "evaluated"}  # the run with no evaluation is gone (soft-deleted)
    assert left["saved"].info.status == "RUNNING"  # Tune resumes it
    assert left["evaluated"].info.status == "FAILED" and left["evaluated"].data.tags[END_STATE_TAG] == "lost_in_crash"


def _checkpoint(folder: Path, step: int) -> Path:
    """A checkpoint in the Trainer's file formats (state, safetensors weights, torch.save'd optimizer)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"weight": torch.full((64, 64), float(step))}, folder / "model.safetensors")
    torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}}, folder / "optimizer.pt")
    return folder


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_lost_checkpoint_takes_the_newest_whole_one_and_half_copied_ones_are_removed(tmp_path):
    from finesweep.search.tuning.recovery import is_whole_checkpoint, recover_lost_checkpoints

    _saved_state(tmp_path / "tune", ["t1"])  # it names checkpoint_000001, which Tune deleted
    trial = tmp_path / "tune" / "trial-t1"
    _checkpoint(trial / "checkpoint_000002", 20)
    _cut(_checkpoint(trial / "checkpoint_000003", 30) / "model.safetensors")  # copies a crash stopped half way
    _cut(_checkpoint(trial / "checkpoint_000004", 40) / "optimizer.pt")
    (_checkpoint(trial / "checkpoint_000005", 50) / "trainer_state.json").unlink()
    assert [is_whole_checkpoint(trial / f"checkpoint_00000{i}") for i in (2, 3, 4, 5)] == [True, False, False, False]

    assert recover_lost_checkpoints(tmp_path / "tune") == ["t1"]
    assert sorted(p.name for p in trial.iterdir()) == ["checkpoint_000001"]
    assert json.loads((trial / "checkpoint_000001" / "trainer_state.json").read_text())["global_step"] == 20


def test_a_lost_checkpoint_with_no_whole_newer_one_is_left_for_tune_to_report(tmp_path):
    from finesweep.search.tuning.recovery import recover_lost_checkpoints

    _saved_state(tmp_path / "tune", ["t1"])
    _cut(_checkpoint(tmp_path / "tune" / "trial-t1" / "checkpoint_000002", 20) / "model.safetensors")
    assert recover_lost_checkpoints(tmp_path / "tune") == []
    assert (tmp_path / "tune" / "trial-t1" / "checkpoint_000002").is_dir()


def test_an_unfinished_trial_is_given_its_most_trained_whole_checkpoint_for_when_tune_restores_it_with_none(tmp_path):
    """Tune's folder numbers are not the order of training (they restart after some resumes): the step is."""
    from finesweep.search.tuning.recovery import unregistered_checkpoints

    _saved_state(tmp_path / "tune", ["t1", "t2", "done"], finished=("done",))
    trial = tmp_path / "tune" / "trial-t1"
    _checkpoint(trial / "checkpoint_000000", 40)
    _checkpoint(trial / "checkpoint_000003", 30)
    _cut(_checkpoint(trial / "checkpoint_000004", 50) / "model.safetensors")  # half copied when the crash came
    _checkpoint(tmp_path / "tune" / "trial-done" / "checkpoint_000001", 60)
    assert unregistered_checkpoints(tmp_path / "tune") == {"t1": str(trial / "checkpoint_000000")}, \
        "t2 has none on disk; a finished trial is not resumed"


def test_state_files_a_crash_cut_short_are_set_aside_for_an_older_copy_or_none_where_tune_does_without(tmp_path):
    """Tune copies its state files into the experiment folder non-atomically; restoring from a cut one it starts the
    experiment again. The second driver session's experiment state is cut: the first one's is read. The continuation's
    variant generator state (its only copy) is cut: Tune resumes without it. The search's searcher state (its only
    copy) is cut: nothing to fall back on, it is left (and logged)."""
    import pickle

    from finesweep.search.tuning.recovery import set_aside_cut_state

    tune = tmp_path / "tune"
    _saved_state(tune, ["first"], session="2026-11-22_10-00-00")
    _cut(_saved_state(tune, ["second"], session="2026-11-22_11-00-00"))
    variants = tune / "basic-variant-state-2026-11-22_10-00-00.json"
    searcher = tune / "searcher-state-2026-11-22_10-00-00.pkl"
    for path in (variants, searcher):
        path.write_bytes(pickle.dumps({"counter": 1, "finished": True}))
        _cut(path)
    (tune / "tuner.pkl").write_bytes(b"")  # not a saved-state file of a session: not Tune's restore's concern here

    assert [t.trial_id for t in saved_trials(tune)] == ["first"], "the cut newest state is not read"
    moved = set_aside_cut_state(tune)
    assert sorted(p.name for p in moved) == ["basic-variant-state-2026-11-22_10-00-00.json.cut",
                                             "experiment_state-2026-11-22_11-00-00.json.cut"]
    assert searcher.is_file() and (tune / "tuner.pkl").is_file()
    assert [p.name for p in tune.glob("experiment_state-*.json")] == ["experiment_state-2026-11-22_10-00-00.json"]
    assert set_aside_cut_state(tune) == [], "whole files stay"
