"""The Trainer's own checkpoints live in a scratch folder on the trial's node; what the sweep keeps is in Tune's storage.

scratch_dir and copy_checkpoint run inside trials; remove_scratch_left_here runs on the driver once Tune is done.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from finesweep.search.tuning import ray_compat


SCRATCH_PREFIX = "finesweep-"  # scratch_dir names the folder so; the sweep's end finds it by it


def scratch_dir(name: str) -> Path:
    """Where the Trainer writes its own checkpoints: under the process's working directory, which Tune and Ray Train
    make a per-trial folder on the worker's node that is never uploaded. Not the trial dir: Tune uploads that with its
    experiment state (every second here), and each upload copied every checkpoint the Trainer had at that moment
    into the sweep folder (5 GB for the example). What the sweep keeps is what the trial reports (CheckpointConfig)."""
    return Path.cwd() / f"{SCRATCH_PREFIX}{name}"


def copy_checkpoint(checkpoint, output_dir: Path) -> str | None:
    """A restored Ray checkpoint copied next to the trial's output, where the Trainer resumes from it; None for none."""
    if checkpoint is None:
        return None
    local = output_dir / "resumed-checkpoint"
    shutil.rmtree(local, ignore_errors=True)
    checkpoint.to_directory(str(local))
    return str(local)


def remove_scratch_left_here(tune_experiment: str) -> None:
    """Once Tune is done: the trials' scratch folders still on this node (the driver's) in Ray's session folder. A
    trial killed while saving a checkpoint (the time budget, a lost worker) leaves that half-written checkpoint
    there, and Ray clears session folders only at reboot. Other nodes of a cluster keep theirs."""
    for folder in ray_compat.train_session_dir().glob(f"*/{tune_experiment}/working_dirs/*/{SCRATCH_PREFIX}*"):
        shutil.rmtree(folder, ignore_errors=True)
