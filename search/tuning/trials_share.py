"""What the trials' share of the time budget can still pay for: no trial starts that could not reach its first
evaluation inside it, and a trial whose next evaluation would come after it ends at the evaluation it just made.

Either way the seconds would only have been cut off unused (a trial is worth its evaluations), and ending the trials
sooner leaves them to the winner's further training (SearchPlan.winner_seconds: whatever the budget has left).
The plan's simulation (search/budget/simulate.py) already starts no trial that could not evaluate.

The share's clock is kept by TrialsShareStopper (callbacks.py); it writes what the gate needs to a small ledger in the
experiment folder, which both read back on a resume (Tune saves the stopper and the searcher apart, so they share no
object after one).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from finesweep.search.budget.pace import TrialTimes, trial_key
from finesweep.spaces.files import write_json_atomic

log = logging.getLogger(__name__)

SHARE_LEDGER = "trials_share.json"
# Set on the result at which the share ended a trial, so its MLflow run says the time budget stopped it, not ASHA.
CUT_BY_SHARE = "cut_by_trials_share"


@dataclass
class ShareState:
    """What the stopper writes and the gate reads: the share's seconds, those spent (a resume's downtime not
    counted), and the trials' pace: their measured periods over the plan's (1.0 until one has measured any)."""

    seconds: float
    spent: float
    pace: float = 1.0

    @property
    def remaining(self) -> float:
        return self.seconds - self.spent

    def write(self, ledger: Path) -> None:
        write_json_atomic(ledger, vars(self), indent=None)

    @classmethod
    def read(cls, ledger: Path) -> ShareState | None:
        try:
            return cls(**json.loads(Path(ledger).read_text()))
        except (OSError, ValueError, TypeError):
            return None  # not written yet (the search's first trials), or cut short by a crash


class TrialStartGate(Searcher):
    """The sweep's searcher, starting no trial that could not reach its first evaluation inside the trials' share:
    the search is then finished (Tune's Searcher.FINISHED), and ends as the trials that run end.

    A trial's first evaluation is the plan's start and period for its combination, times the pace the trials have
    measured. Where no combination could evaluate it does not ask the searcher (Optuna would record a trial that
    never runs); where the one it drew could not, it ends there too (another draw would skew TPE's model)."""

    def __init__(self, searcher: Searcher, ledger: Path, times: dict[str, TrialTimes]):
        self.searcher, self.ledger, self.times = searcher, Path(ledger), times
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        state = ShareState.read(self.ledger)
        if state is None or not self.times:
            return self.searcher.suggest(trial_id)
        fastest = min(times.first_evaluation for times in self.times.values()) * state.pace
        if state.remaining < fastest:
            return self._closed(state, fastest, "any combination")
        suggestion = self.searcher.suggest(trial_id)
        drawn = self.times.get(trial_key(suggestion) or "") if isinstance(suggestion, dict) else None
        if drawn and state.remaining < drawn.first_evaluation * state.pace:
            return self._closed(state, drawn.first_evaluation * state.pace, trial_key(suggestion))
        return suggestion

    def _closed(self, state: ShareState, needed: float, what: str | None) -> str:
        log.info("no further trial starts: the trials' share has %.0f s left, and a trial of %s needs about %.0f s "
                 "to its first evaluation (the plan's, at the trials' pace %.2f); the rest goes to the winner",
                 max(0.0, state.remaining), what, needed, state.pace)
        return Searcher.FINISHED

    # Everything else is the searcher's, as Tune's own ConcurrencyLimiter passes it on.
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def add_evaluated_point(self, *args, **kwargs):
        return self.searcher.add_evaluated_point(*args, **kwargs)

    def get_state(self) -> dict[str, Any]:
        """The gate's own part of Tune's saved search state (the searcher saves its own)."""
        return {name: value for name, value in self.__dict__.items() if name != "searcher"}

    def set_state(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)

    @property
    def metric(self) -> str:
        return self.searcher.metric

    @property
    def mode(self) -> str:
        return self.searcher.mode
