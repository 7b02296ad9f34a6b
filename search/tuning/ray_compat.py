"""Every private name and file format of Ray (Tune, Train) that finesweep relies on, and nothing else.

Checked on ray 2.60 (pinned in pyproject.toml); tests/search/tuning/test_ray_compat.py fails, naming the installed
version, when a Ray release changes any of them. Everything else in finesweep uses Ray's public API only.
"""

from __future__ import annotations

import json
import pickletools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ray Train V2's controller callbacks: RunConfig(callbacks=...) accepts them, but the base class is internal. The
# data-parallel trial needs one to learn its Ray Train controller's handle (to abort it when Tune stops the trial).
from ray.train.v2._internal.execution.callback import ControllerCallback

__all__ = ["ControllerCallback", "RESUMES_WITHOUT", "SavedTrial", "add_actor_mixin", "asha_milestones_of",
           "default_temp_dir", "is_whole_state_file", "local_node_on_loopback", "optuna_study_of", "saved_trials",
           "state_files", "train_session_dir", "tune_report_queue"]

# Tune's saved state, one file per kind and driver session (the session's start time in the name), in the experiment's
# folder: experiment_state (JSON), and its search algorithm's basic-variant-state, search_gen_state and searcher-state
# (cloudpickles, whatever their suffix). A restore reads the newest file of each kind by name.
STATE_FILE = re.compile(r"^(?P<kind>[a-z_-]+)-\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}\.(json|pkl)$")
# Kinds a restore does without: Tune adds its experiment's configurations to the search algorithm only of a run it did
# not resume (tune.run), so a basic variant generator with no saved state creates no trial.
RESUMES_WITHOUT = ("basic-variant-state",)


def local_node_on_loopback() -> dict[str, Any]:
    """ray.init keywords that bind a local Ray's node to 127.0.0.1 (a private keyword of ray.init)."""
    return {"_node_ip_address": "127.0.0.1"}


def asha_milestones_of(scheduler: Any) -> list[int]:
    """The iterations at which an ASHAScheduler judges trials, lowest first (its single bracket's rungs: private)."""
    return sorted(int(milestone) for milestone, _ in scheduler._brackets[0]._rungs)


def train_session_dir() -> Path:
    """Ray Train's folder in the current Ray session, under which trials' working dirs are made (private function)."""
    from ray.train.constants import _get_ray_train_session_dir

    return Path(_get_ray_train_session_dir())


def default_temp_dir() -> Path:
    """The folder under which a local Ray keeps its sessions when none is given (/tmp/ray on Linux; private)."""
    from ray._common.utils import get_default_ray_temp_dir

    return Path(get_default_ray_temp_dir())


def optuna_study_of(searcher: Any) -> Any:
    """The Optuna study that Tune's OptunaSearch asks and tells (no public accessor): what Optuna was told."""
    return searcher._ot_study


def add_actor_mixin(trainable: Any, mixin: type) -> Any:
    """Make Tune build the function trainable's actor class with `mixin` among its bases (Tune's `__mixins__` hook,
    read by `wrap_function`), so the mixin's `cleanup` runs when Tune stops the trial."""
    trainable.__mixins__ = (mixin,)
    return trainable


def tune_report_queue(callback: Any) -> Any:
    """The queue through which Ray Train's TuneReportCallback hands results to the Tune session (no public accessor):
    a stopping trial drains it so that Ray Train's controller cannot block on a full queue."""
    return callback._training_actor_item_queue


@dataclass(frozen=True)
class SavedTrial:
    """A trial as Tune's newest saved experiment state has it."""

    trial_id: str
    status: str  # PENDING, RUNNING, PAUSED, TERMINATED, ERROR
    folder: Path
    checkpoint: str | None  # the latest checkpoint's folder name (every finesweep report has one)


def saved_trials(experiment_dir: Path) -> list[SavedTrial]:
    """The trials of Tune's newest saved experiment state ([] before its first save), read from the state file's
    plain JSON fields: `trial_data` holds, per trial, its JSON state (trial_id, status, relative_logdir) and its
    runtime JSON (last_result with checkpoint_dir_name)."""
    states = [path for path in state_files(experiment_dir).get("experiment_state", []) if is_whole_state_file(path)]
    if not states:
        return []
    trials = []
    for trial_json, runtime_json in json.loads(states[-1].read_text())["trial_data"]:
        trial, runtime = json.loads(trial_json), json.loads(runtime_json)
        trials.append(SavedTrial(trial["trial_id"], trial["status"], Path(experiment_dir) / trial["relative_logdir"],
                                 (runtime.get("last_result") or {}).get("checkpoint_dir_name")))
    return trials


def state_files(experiment_dir: Path) -> dict[str, list[Path]]:
    """Tune's saved-state files in an experiment folder by kind, oldest first (the last is the one a restore reads)."""
    kinds: dict[str, list[Path]] = {}
    for path in sorted(Path(experiment_dir).iterdir()) if Path(experiment_dir).is_dir() else []:
        if match := STATE_FILE.match(path.name):
            kinds.setdefault(match["kind"], []).append(path)
    return kinds


def is_whole_state_file(path: Path) -> bool:
    """Whether a saved-state file was written to the end. Tune writes them whole in a staging folder, then copies them
    into the experiment folder with pyarrow, in no set order and not atomically: a crash in the middle of that copy
    leaves a file cut short, which Tune's restore fails on, and then it silently starts the experiment again. Checked
    without loading anything: JSON parses, a pickle's opcodes run to its STOP."""
    data = path.read_bytes()
    if data[:1] in (b"{", b"["):
        try:
            json.loads(data)
        except ValueError:
            return False
        return True
    try:
        return any(opcode.name == "STOP" for opcode, _, _ in pickletools.genops(data))
    except (ValueError, IndexError, UnicodeDecodeError):  # cut short (or empty) before its STOP
        return False
