"""A sweep whose controller is killed with SIGKILL mid-trial resumes: nothing re-run, nothing duplicated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import tiny
from tests.sweeps import (crash_when, evaluation_steps, finesweep, lose_the_saved_checkpoint, one_model_sweep,
                          run_tags, saved_checkpoints_of_running_trials)

TRIALS, MAX_STEPS, EVERY = 3, 90, 5  # a trial long enough that its middle outlasts a poll on a busy machine

SWEEP = one_model_sweep("crashy", 5, TRIALS, EVERY, MAX_STEPS, quantization="none")  # the full model is exported


def _mid_trial(sweep_dir: Path) -> dict[str, list[int]] | None:
    """The evaluation steps per trial run once a trial is past its third evaluation, not near its end, and Tune's
    saved state names a checkpoint on disk."""
    seen = evaluation_steps(sweep_dir)
    if any(3 <= len(steps) and steps[-1] < MAX_STEPS - 2 * EVERY for steps in seen.values()) and \
            saved_checkpoints_of_running_trials(sweep_dir):
        return seen
    return None


def test_a_sweep_killed_mid_trial_resumes_without_rerunning_or_duplicating(tmp_path):
    tiny.classification_folder(tmp_path, SWEEP, rows=400)
    sweep_dir = tmp_path / "runs" / "crashy"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    before = crash_when(process, lambda: _mid_trial(sweep_dir), "a trial's third evaluation")
    named = saved_checkpoints_of_running_trials(sweep_dir, on_disk=False)  # the state Tune saved last, after the kill
    assert named, f"no running trial in Tune's last saved state after {before}"
    folder, checkpoint = next(iter(named.items()))
    if (folder / checkpoint).is_dir():  # else the kill came as Tune had deleted it (its newer one not yet recorded)
        lose_the_saved_checkpoint(folder, checkpoint)  # one trial also lost the checkpoint the saved state names

    # A machine cache of its own: were the resume to probe again (a combination first measured under load is, on a
    # quieter machine), it could choose another micro-batch for trials that began with the first.
    quiet_cache = tmp_path / "another-cache"
    result = finesweep("resume", "sweep.yaml", cwd=tmp_path, env={"FINESWEEP_CACHE": str(quiet_cache)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the answers this sweep started with, read from sweep-state.json" in result.stdout
    assert not (quiet_cache / "probe").exists(), "the resume probed again instead of reading what the trials began with"
    assert f"trial {folder.name.split('-')[-1]}: its last saved checkpoint {checkpoint} was deleted" in result.stderr
    after = evaluation_steps(sweep_dir)
    assert len(after) == TRIALS, "a resumed sweep runs exactly the planned trials, each in its own MLflow run"
    assert set(before) <= set(after), "runs of the first attempt are continued, not replaced"
    for run_id, steps in after.items():
        assert steps == list(range(EVERY, MAX_STEPS + 1, EVERY)), f"{run_id}: evaluations {steps}, {run_tags(sweep_dir, run_id)}"
    interrupted = [run_id for run_id, steps in before.items() if steps and steps[-1] < MAX_STEPS]
    assert interrupted
    for run_id in interrupted:
        resumed_from = run_tags(sweep_dir, run_id).get("finesweep.resumed_from_step")
        assert resumed_from is not None and int(resumed_from) >= EVERY, "the trial went on from its checkpoint"
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["best"] and (sweep_dir / "export" / "model" / "model.safetensors").is_file()
