"""Every private name and file format of Ray (Tune, Train) that finesweep relies on, and nothing else.

Checked on ray 2.60 (pinned in pyproject.toml); tests/search/tuning/test_ray_compat.py fails, naming the installed
version, when a Ray release changes any of them. Everything else in finesweep uses Ray's public API only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ray Train V2's controller callbacks: RunConfig(callbacks=...) accepts them, but the base class is internal. The
# data-parallel trial needs one to learn its Ray Train controller's handle (to abort it when Tune stops the trial).
from ray.train.v2._internal.execution.callback import ControllerCallback

__all__ = ["ControllerCallback", "SavedTrial", "add_actor_mixin", "asha_milestones_of", "default_temp_dir", "local_node_on_loopback",
           "optuna_study_of", "saved_trials", "train_session_dir", "tune_report_queue"]

EXPERIMENT_STATE_GLOB = "experiment_state-*.json"  # Tune's experiment state files; it restores the newest by name


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
    states = sorted(Path(experiment_dir).glob(EXPERIMENT_STATE_GLOB))
    if not states:
        return []
    trials = []
    for trial_json, runtime_json in json.loads(states[-1].read_text())["trial_data"]:
        trial, runtime = json.loads(trial_json), json.loads(runtime_json)
        trials.append(SavedTrial(trial["trial_id"], trial["status"], Path(experiment_dir) / trial["relative_logdir"],
                                 (runtime.get("last_result") or {}).get("checkpoint_dir_name")))
    return trials
