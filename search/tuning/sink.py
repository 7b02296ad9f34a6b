"""Where a trial's evaluations go: Tune (with the checkpoint) and the trial's MLflow run; how a trial's end is recorded."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from finesweep.search.selection.best import (BEST_SO_FAR, CHECKPOINT_SCORE, SINCE_BEST, best_of, betters,
                                             checkpoint_score, evaluations_since_best)
from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import END_STATE_TAG, ERROR_TAG, RESUMED_TAG
from finesweep.trainer.trial import BatchSplitError, DivergedError, TrialPlan


class TuneMlflowSink:
    """Sends each evaluation to Tune (with its checkpoint) and to the trial's MLflow run."""

    def __init__(self, tracker: Tracker, run_id: str, objective: tuple[str, str], logged_through: int = 0,
                 trained_through: int = 0, best_so_far: float = math.nan, since_best: int = 0):
        self.tracker, self.run_id = tracker, run_id
        self.metric, self.mode = objective
        # A resumed trial's best and its evaluations since that best count from those before its checkpoint.
        self.best_so_far, self.since_best = best_so_far, since_best
        # A resumed trial redoes the steps between its last checkpoint and the crash; MLflow already has them:
        # the evaluations up to logged_through, and the training logs (written more often) up to trained_through.
        self.logged_through, self.trained_through = logged_through, trained_through
        # Training logs (loss, learning rate: several per evaluation) wait and go with the next evaluation in one
        # call: one synchronous write per evaluation instead of one per log line (benchmarks/README.md).
        self.pending: list[tuple[int, dict[str, float], int]] = []

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        if step > self.trained_through:
            self.pending.append((step, metrics, int(time.time() * 1000)))

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        if step > self.logged_through:
            self.pending.append((step, metrics, int(time.time() * 1000)))
        self.flush()
        value = float(metrics.get(self.metric, math.nan))
        self.since_best = 0 if betters(value, self.best_so_far, self.mode) else self.since_best + 1
        self.best_so_far = best_of([self.best_so_far, value], self.mode)
        score = checkpoint_score(value, step, self.mode)
        self.report({**metrics, "step": step, "mlflow_run_id": self.run_id, CHECKPOINT_SCORE: score,
                     BEST_SO_FAR: self.best_so_far, SINCE_BEST: self.since_best}, checkpoint_dir)

    def flush(self) -> None:
        """Send what waits (also at the end of a trial: the losses after its last evaluation, a diverged one's)."""
        if self.pending:
            rows, self.pending = self.pending, []
            self.tracker.log_metric_rows(self.run_id, rows)

    def report(self, result: dict[str, Any], checkpoint_dir: Path) -> None:
        """To Tune, with the checkpoint (Tune copies it into the sweep's storage and ranks it)."""
        from ray import tune

        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))
        # The copy in the sweep's storage is made before report returns, and the Trainer never reads its own again.
        # Kept, it would stay in Ray's session folder (cleared only at reboot): model and optimizer state per trial,
        # the last of every trial that Tune stops, since a stopped trial's process ends with no clean-up of its own.
        shutil.rmtree(checkpoint_dir, ignore_errors=True)


def sink_for(plan: TrialPlan, tracker: Tracker, run_id: str, objective: tuple[str, str],
             sink_class: Callable[..., TuneMlflowSink] = TuneMlflowSink) -> TuneMlflowSink:
    """A fresh trial's sink, or a resumed one's: it continues the same MLflow run without repeating steps."""
    if plan.resume_from is None:
        return sink_class(tracker, run_id, objective)
    state = json.loads((Path(plan.resume_from) / "trainer_state.json").read_text())
    start = int(state["global_step"])
    logged = tracker.last_step(run_id, "eval_loss")  # the server's and the spool's: nothing is logged twice
    trained = tracker.last_step(run_id, "loss")  # training logs come every few steps, past the last evaluation
    tracker.set_tags(run_id, {RESUMED_TAG: start})
    # The Trainer's log history in the checkpoint holds every evaluation up to it (metric names as the sweep's).
    earlier = [entry[objective[0]] for entry in state.get("log_history", []) if objective[0] in entry]
    return sink_class(tracker, run_id, objective, logged_through=logged, trained_through=trained,
                      best_so_far=best_of(earlier, objective[1]),
                      since_best=evaluations_since_best(earlier, objective[1]))


def final_failure(error: BaseException) -> str | None:
    """The end state of a failure that retrying cannot cure, or None for one that a retry might."""
    if isinstance(error, DivergedError):
        return "diverged"
    if isinstance(error, BatchSplitError):
        return "batch_not_divisible"
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower():
        return "out_of_memory"
    return None


def record_end(tracker: Tracker, run_id: str, state: str, message: str | None) -> None:
    """Closes the trial's MLflow run with its end state (completed, diverged, out_of_memory, failed...)."""
    tags = {END_STATE_TAG: state}
    if message:
        tags[ERROR_TAG] = message
    tracker.set_tags(run_id, tags)
    tracker.finish(run_id, "FINISHED" if state == "completed" else "FAILED")
