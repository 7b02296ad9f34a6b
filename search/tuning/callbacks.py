"""Tune callbacks and stoppers of a sweep: the time and step budgets, a trial's plateau, and the recorder that closes
each trial's MLflow run.

Tune pickles both with the experiment (by module path: see moved.py for sweeps started before a move).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from ray.tune import Callback, Stopper

from finesweep.search.budget.plan import SearchPlan
from finesweep.search.selection.best import SINCE_BEST
from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import END_STATE_TAG, ERROR_TAG
from finesweep.search.tuning.context import TrialContext
from finesweep.search.budget.pace import TrialTimes, mean_pace, measured_pace, next_period
from finesweep.search.tuning.trials_share import CUT_BY_SHARE, ShareState
from finesweep.spaces import SweepConfig
from finesweep.spaces.files import write_json_atomic
from finesweep.spaces.space import BASELINE_KEY


STEP_LEDGER = "step_budget.json"
LEDGER_EVERY_SECONDS = 1.0  # how often the trials' share writes its spent seconds besides at each result


class StepBudgetStopper(Stopper):
    """Ends the whole search once the trials' training steps add up to `budget` (search.step_budget).

    Each result carries the trial's global `step`; a trial's spend is the largest step it reported (a trial restarted
    from a checkpoint re-reports steps it had already counted). `stop_all` then stops every running trial as Tune's
    time_budget_s does: no completion event, the evaluations so far count. Results come only at evaluations and a
    trial waits in `tune.report` until the controller lets it go on, so the spend passes the budget by less than one
    evaluation interval per running trial.

    Tune pickles the stopper once, when the Tuner is created, and a resumed sweep gets that copy back: the spend is
    also kept in `ledger` (in the experiment folder) and read back when unpickled, so a resume does not start the
    budget again."""

    def __init__(self, budget: int, ledger: Path):
        self.budget, self.ledger = budget, Path(ledger)
        self.steps: dict[str, int] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.ledger.is_file():
            self.steps = {**self.steps, **json.loads(self.ledger.read_text())}

    @property
    def spent(self) -> int:
        return sum(self.steps.values())

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        step = result.get("step")
        if isinstance(step, (int, float)) and step > self.steps.get(trial_id, 0):
            self.steps[trial_id] = int(step)
            write_json_atomic(self.ledger, self.steps, indent=None)  # a crash mid-write leaves the previous ledger
        return False  # single trials are ASHA's to stop; the budget ends them all at once

    def stop_all(self) -> bool:
        return self.spent >= self.budget


class TrialsShareStopper(Stopper):
    """Ends the trials' share of the time budget (the plan's trials_seconds) as Tune's time_budget_s does, but only
    once some trial has reported an evaluation: trials slowed below the plan's pace (a busy machine) would otherwise
    all stop before evaluating and leave nothing to export. It waits at most until `longest` seconds (the whole
    search budget), taking the time from the winner's further training (exploit.py gives it what is left).

    A trial whose next evaluation would come after the share's end ends at the evaluation it just reported (its
    evaluations count; the rest of its period would be cut off unused): see trials_share.py, which also keeps new
    trials from starting too late by the `ledger` written here. `times`: the plan's, per combination.

    Like Tune's TimeoutStopper it counts the seconds between its calls, and a resumed sweep gets back what it had
    spent (Tune pickles stoppers with the experiment; the ledger, written more often, when it is further on): the
    downtime of a crash is not counted."""

    def __init__(self, seconds: float, longest: float, ledger: Path | None = None,
                 times: dict[str, TrialTimes] | None = None):
        self.seconds, self.longest = seconds, max(seconds, longest)
        self.ledger, self.times = ledger, times or {}
        self.spent, self.evaluated = 0.0, False
        self.paces: dict[str, float] = {}  # trial id -> its last period over the plan's
        self._last_check: float | None = None
        self._written = 0.0

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A stopper pickled by an older finesweep has no ledger, times or paces.
        self.__dict__.update({"ledger": None, "times": {}, "paces": {}, **state, "_last_check": None, "_written": 0.0})
        written = ShareState.read(self.ledger) if self.ledger else None
        if written and written.spent > self.spent:
            self.spent = written.spent

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.evaluated = True  # a trial reports only at its evaluations
        self._tick()
        if (pace := measured_pace(result, self.times)) is not None:
            self.paces[trial_id] = pace
        self._write(force=True)
        period = next_period(result, self.times)
        # A trial that ended by itself is told once more with its last result (Tune's duplicate, done): not a cut.
        if result.get("done") or period is None or self.spent + period <= self.seconds:
            return False
        result[CUT_BY_SHARE] = True  # the recorder's end state (the result becomes the trial's last)
        return True

    def stop_all(self) -> bool:
        self._tick()
        self._write()
        return self.spent >= self.longest or (self.evaluated and self.spent >= self.seconds)

    def _tick(self) -> None:
        now = time.time()
        if self._last_check is not None:
            self.spent += now - self._last_check
        self._last_check = now

    def _write(self, force: bool = False) -> None:
        """The ledger the trial start gate reads: at each result, and once a second besides (Tune asks every loop)."""
        if self.ledger is None or not (force or self.spent - self._written >= LEDGER_EVERY_SECONDS):
            return
        ShareState(self.seconds, self.spent, mean_pace(self.paces)).write(self.ledger)
        self._written = self.spent


class PlateauStopper(Stopper):
    """Stops a trial once `patience` evaluations in a row have not bettered its best (search.plateau_patience): the
    trial counts them (SINCE_BEST, with each result). Tune stops it as ASHA does; its checkpoints stay candidates.
    The baseline trial is never stopped: it is the reference, trained to its recipe's end (as BaselineKeepingASHA)."""

    def __init__(self, patience: int):
        self.patience = patience

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return plateaued(result, self.patience) and not (result.get("config") or {}).get(BASELINE_KEY)

    def stop_all(self) -> bool:
        return False


def plateaued(result: dict[str, Any], patience: int | None) -> bool:
    """Whether the trial that reported `result` has gone `patience` evaluations without a better best (None: off)."""
    return bool(patience) and int(result.get(SINCE_BEST) or 0) >= patience


def budget_end_state(config: SweepConfig, results) -> str:
    """The end state of the trials the search stopped without a completion event: which budget ended it."""
    budget = config.search.step_budget
    spent = sum(int(r.metrics.get("step") or 0) for r in results if r.metrics)
    return "stopped_by_step_budget" if budget and spent >= budget else "stopped_by_time_budget"


def no_evaluation_reason(plan: SearchPlan, results) -> str:
    """Why a search ended with no evaluation to export, and the fix: its trials failed, or the time budget ended
    them all before their first evaluation (a slower start than the plan's: a busy machine, a large model's load)."""
    failed = sum(1 for r in results if r.error is not None)
    unevaluated = len(results) - failed
    parts = [f"{failed} trial(s) failed (their errors are above and on their MLflow runs)"] if failed else []
    if unevaluated:
        budget = f"the time budget ({plan.budget})" if plan.budget_seconds else "the search's budget"
        parts.append(f"{unevaluated} trial(s) were stopped by {budget} before their first evaluation "
                     f"(every {plan.eval_every_steps} steps, search.eval_every_steps): raise "
                     "search.time_budget_minutes (or --time-limit), or lower search.eval_every_steps")
    reasons = "; ".join(parts or ["no trial ran"])
    return f"No trial reported an evaluation, so there is nothing to export: {reasons}."


class TrialEndRecorder(Callback):
    """Closes each trial's MLflow run with its end state (an ASHA stop ends the trial's process before it can),
    and hands every result and end to `on_event` for the terminal display.

    It reads nothing from the tracking server that it can know otherwise (each result names the trial's run), so a
    server that is down costs no wait here: the closing writes go to the sweep's spool like any other.

    Tune pickles its callbacks with the experiment state (and a resumed sweep gets them back from there):
    the MLflow client is rebuilt after a pickle; `on_event` must be picklable."""

    def __init__(self, tracking_uri: str, context: TrialContext, max_evaluations: int, on_event: Callable | None = None):
        self.tracking_uri, self.context, self.max_evaluations = tracking_uri, context, max_evaluations
        self.on_event = on_event
        self._tracker: Tracker | None = None
        self._open: dict[str, tuple[str, Any]] = {}  # trial id -> (its run id, last step) until its end event

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tracker": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_open": {}, **state})  # a recorder pickled by an older finesweep has no _open

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.tracking_uri, self.context.spool_dir or None)
        return self._tracker

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("mlflow_run_id"):
            self._open[trial.trial_id] = (result["mlflow_run_id"], result.get("step"))
        if self.on_event:
            self.on_event("result", trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result
        patience = self.context.sweep.get("search", {}).get("plateau_patience")
        done = last.get("training_iteration", 0) >= self.max_evaluations
        step = last.get("step")
        state = ("completed" if done else f"stopped_by_time_budget_at_step_{step}" if last.get(CUT_BY_SHARE)
                 else f"plateaued_at_step_{step}" if plateaued(last, patience) else f"stopped_early_at_step_{step}")
        self._close(trial, state, "FINISHED", None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._close(trial, "failed", "FAILED", _error_text(trial))

    def close_unfinished(self, state: str) -> None:
        """After the search: trials Tune stopped without a completion event (the time budget) end as `state`."""
        closed = set()
        for run_id, step in self._open.values():
            self.tracker.close_if_running(run_id, {END_STATE_TAG: f"{state}_at_step_{step}"}, "FINISHED")
            closed.add(run_id)
        self._open.clear()
        # Runs that never reported (and, on a resumed sweep, those of the controller before): as the server has
        # them; none when it does not answer (the warning says so).
        for run in self.tracker.trial_runs(self.context.experiment_id, self.context.parent_run_id):
            if run.info.status == "RUNNING" and run.info.run_id not in closed:
                step = self.tracker.last_step(run.info.run_id, "eval_loss")
                self.tracker.close_if_running(run.info.run_id, {END_STATE_TAG: f"{state}_at_step_{step}"}, "FINISHED")

    def _close(self, trial, state: str, status: str, message: str | None) -> None:
        self._open.pop(trial.trial_id, None)
        # Every result names the trial's run; a trial that ended before its first result is looked up.
        run_id = (trial.last_result or {}).get("mlflow_run_id") or self.tracker.trial_run(
            self.context.experiment_id, self.context.parent_run_id, trial.trial_id)
        if run_id:
            tags = {END_STATE_TAG: state, **({ERROR_TAG: message} if message else {})}
            self.tracker.close_if_running(run_id, tags, status)
        if self.on_event:
            self.on_event("end", trial, {"state": self.tracker.end_state(run_id) or state})


def _error_text(trial) -> str:
    path = getattr(trial, "error_file", None) or ""
    try:
        lines = Path(path).read_text().strip().splitlines()
        return lines[-1] if lines else "unknown error"
    except OSError:
        return "unknown error"
