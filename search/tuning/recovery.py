"""What a crash between Tune's experiment-state saves leaves behind, made right before a sweep resumes.

Tune saves its experiment state (trials, their latest checkpoints) only now and then, while trials go on reporting,
checkpointing and creating MLflow runs. A controller killed in between leaves a saved state behind the disk and the
tracking store; these functions read the saved state (ray_compat.saved_trials) and mend the difference, or find
what the resumed trials need to mend it themselves.
"""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import END_STATE_TAG, TRIAL_TAG
from finesweep.search.tuning.context import TrialContext
from finesweep.search.tuning.ray_compat import RESUMES_WITHOUT, is_whole_state_file, saved_trials, state_files

log = logging.getLogger(__name__)


def drop_runs_of_unsaved_trials(tracker: Tracker, context: TrialContext, experiment_dir: Path) -> list[str]:
    """MLflow runs of trials that started after Tune's last state save, made right for the resume.

    The restored experiment does not know those trials: Tune never continues them and samples others in their place,
    so their runs would stay open beside the new ones. A run with no evaluation is deleted (MLflow's soft delete,
    which the UI can undo); one with evaluations is closed as `lost_in_crash`, its evaluations kept on record."""
    saved = {trial.trial_id for trial in saved_trials(experiment_dir)}
    dropped = []
    for run in tracker.trial_runs(context.experiment_id, context.parent_run_id) if saved else []:
        trial_id = run.data.tags.get(TRIAL_TAG)
        if run.info.status != "RUNNING" or not trial_id or trial_id in saved:
            continue
        if tracker.last_step(run.info.run_id, "eval_loss"):
            tracker.close_if_running(run.info.run_id, {END_STATE_TAG: "lost_in_crash"}, "FAILED")
        else:
            tracker.call(lambda run_id=run.info.run_id: tracker.client.delete_run(run_id))
        dropped.append(trial_id)
    return dropped


def set_aside_cut_state(experiment_dir: Path) -> list[Path]:
    """Move Tune's newest saved-state files that a crash cut short (ray_compat.is_whole_state_file) out of the
    restore's way, to `<name>.cut`: Tune fails on one and silently starts the experiment again (the winner's
    continuation trained again from the winner's checkpoint under a new MLflow run; seen in CI). Its restore then
    reads the kind's older file, from an earlier session of the sweep, or does without where it can (RESUMES_WITHOUT).
    A cut file with neither is left as it is, and said. Returns the files set aside."""
    moved = []
    for kind, files in state_files(experiment_dir).items():
        while files and not is_whole_state_file(files[-1]):
            if len(files) == 1 and kind not in RESUMES_WITHOUT:
                log.warning("%s was cut short by the crash and no earlier copy is left: Tune will start the "
                            "experiment %s again", files[-1].name, Path(experiment_dir).name)
                break
            cut = files.pop()
            moved.append(cut.rename(cut.with_name(f"{cut.name}.cut")))
            log.warning("%s was cut short by the crash; Tune resumes %s", cut.name,
                        f"from {files[-1].name}" if files else f"without its {kind}")
    return moved


def recover_lost_checkpoints(experiment_dir: Path) -> list[str]:
    """Give back each unfinished trial the checkpoint Tune's saved state names, when Tune deleted it after that save.

    Tune registers a new checkpoint and at once deletes the previous latest one if it is not among the kept best; it
    saves its experiment state only now and then. A controller killed between the two leaves a state whose latest
    checkpoint is gone, and Tune's restore of that trial fails ("does not exist on storage anymore") on every retry.
    The trial's newer checkpoints on disk are unknown to that state: the newest whole one takes the lost one's name,
    so the trial resumes from later still (the Trainer reads its step from the checkpoint; MLflow skips what it has),
    and the other unknown ones are removed (Tune would never delete them). Returns the trials repaired."""
    import shutil

    repaired = []
    for trial in saved_trials(experiment_dir):
        lost = trial.checkpoint
        if trial.status in ("TERMINATED", "ERROR") or not lost or (trial.folder / lost).exists():
            continue
        newer = sorted(p for p in trial.folder.glob("checkpoint_*") if p.name > lost)
        whole = [p for p in newer if is_whole_checkpoint(p)]
        if not whole:
            continue  # nothing to resume from: Tune reports the trial's restore failure as it is
        whole[-1].rename(trial.folder / lost)
        for unknown in newer:
            shutil.rmtree(unknown, ignore_errors=True)
        log.warning("trial %s: its last saved checkpoint %s was deleted after Tune's last state save; it resumes "
                    "from the newer %s instead", trial.trial_id, lost, whole[-1].name)
        repaired.append(trial.trial_id)
    return repaired


def unregistered_checkpoints(experiment_dir: Path) -> dict[str, str]:
    """trial id -> its most trained whole checkpoint on disk, for each unfinished trial of Tune's saved state.

    Tune registers a function trainable's checkpoint only with a save call it schedules after the result that carries
    it (tune_controller's _schedule_trial_save); a state saved in between holds the result but not the checkpoint. A
    trial whose first checkpoint fell in that window is restored with none and would train again from its start (the
    winner's continuation: from the winner's checkpoint, losing what it had trained; seen in CI about one run in
    three). The trial takes this one only where Tune gives it none (trainable.py); Tune's own always comes first."""
    found = {}
    for trial in saved_trials(experiment_dir):
        if trial.status in ("TERMINATED", "ERROR"):
            continue
        whole = [(_trained_step(p), p) for p in trial.folder.glob("checkpoint_*") if is_whole_checkpoint(p)]
        if whole:
            found[trial.trial_id] = str(max(whole)[1])
        log.info("resume: trial %s (%s) has %d whole checkpoint(s) on disk%s", trial.trial_id, trial.status,
                 len(whole), f", the most trained {found[trial.trial_id]}" if whole else "")
    return found


def _trained_step(checkpoint: Path) -> int:
    """The Trainer's step a checkpoint was saved at (Tune's folder numbers restart their count after some resumes)."""
    return int(json.loads((checkpoint / "trainer_state.json").read_text()).get("global_step") or 0)


def is_whole_checkpoint(folder: Path) -> bool:
    """Whether a Trainer checkpoint folder was written to the end: a crash can stop a copy into the sweep's storage
    half way (Tune copies the files in no set order, and writes no completion marker). It needs the Trainer's state
    and weights, and each file it has must be whole by its own format (checked without loading anything)."""
    files = [f for f in folder.rglob("*") if f.is_file()]
    if not (folder / "trainer_state.json").is_file() or not any(f.suffix == ".safetensors" for f in files):
        return False
    return all(_file_is_whole(f) for f in files)


def _file_is_whole(path: Path) -> bool:
    try:
        if path.suffix == ".safetensors":  # 8-byte header length, JSON header, then the tensors it places
            with path.open("rb") as f:
                header_length = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(header_length))
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
            return path.stat().st_size == 8 + header_length + end
        if path.suffix in (".pt", ".pth", ".bin"):  # torch.save's zip format: its central directory is written last
            return zipfile.is_zipfile(path)
        if path.suffix == ".json":
            json.loads(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True
