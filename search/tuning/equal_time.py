"""The baseline recipe trained again for as long as the export trained (search.baseline.budget: equal).

The baseline trial trains for a trial's share of the budget; the export, for its trial and the rest of the budget.
Their difference mixes what the search found with how long each trained. Here, after the search and the winner's
further training, the baseline recipe (the baseline trial's configuration, as a user's Trainer run has it: every
weight trained, the checkpoint's dropout) trains again from step 0, alone, with every core the winner's further
training had, for as many seconds as the export's runs trained in all, its linear decay sized to end with them
(trainer/schedule.py), as a user sizes the epochs to the time they have. Its best evaluation on validation (the
export's own rule) is scored on the test split beside the export by the same code: the gain at equal time.

It is a Tune experiment of one trial, as the winner's continuation is (exploit.py): tracked in MLflow, checkpointed,
retried, and resumed after a crash with what it trained. Its evaluations never compete for the export.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from finesweep.search.selection.best import EQUAL_TIME_TRIAL, Best, pick_best
from finesweep.search.tuning import exploit
from finesweep.search.tuning.context import EQUAL_TIME_KEY
from finesweep.search.tuning.exploit_outcome import failure
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import BASELINE_KEY

TRIAL_NAME = EQUAL_TIME_TRIAL  # its Tune trial, folder and MLflow run


@dataclasses.dataclass(frozen=True)
class EqualTimeTrialName:
    """Tune's trial name of the run (a class, not a closure: Tune pickles its config)."""

    def __call__(self, trial) -> str:
        return TRIAL_NAME


def recipe(baseline: Best) -> dict[str, Any]:
    """The baseline trial's configuration as it trained, not marked as the search's baseline trial (whose length is
    a trial's): every weight and random batches, as a Trainer run (context.trains_like_trainer)."""
    params = {key: value for key, value in baseline.params.items() if key != BASELINE_KEY}
    return {**params, EQUAL_TIME_KEY: True}


def experiment_name(search_experiment: str) -> str:
    return f"{search_experiment}-baseline"


def train_baseline_again(config: SweepConfig, setup, baseline: Best, results, seconds: float,
                         tracking_uri: str, console, resuming: bool,
                         save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Train the baseline recipe from step 0 for `seconds` (the export's), or what is left of them after a crash
    (`resuming`: the run recorded by `save` before it started goes on from its last checkpoint). The record for
    summary.json: the checkpoint the test split scores (its best evaluation; None where it reported none, with
    `why`), the seconds asked and trained."""
    from finesweep.search.tuning.callbacks import TrialEndRecorder
    from finesweep.search.tuning.ray_cluster import largest_node_cpus
    from finesweep.search.tuning.tuner import TuneSetup, restore_tuner

    trial_cpus = config.resources.cpus_per_trial
    config = exploit.every_core(config, largest_node_cpus())
    experiment = experiment_name(setup.experiment_name)
    path = setup.storage.resolve() / experiment
    earlier = restore_tuner(config, setup, path).get_results() if resuming and path.is_dir() else None
    trained = exploit.seconds_trained(earlier) if earlier is not None else 0.0
    left = seconds - trained
    record = {"seconds": round(seconds, 1)}
    if left < exploit.MIN_SECONDS:
        if earlier is None:
            return {**record, "checkpoint": None, "trained_seconds": 0.0,
                    "why": f"{seconds:.0f} s is too short for a run's start and an evaluation"}
        return _ended(config, record, earlier, trained)
    save(record)
    console.step(f"Training the baseline recipe again from step 0 for {left:.0f} s with "
                 f"{config.resources.cpus_per_trial:g} CPU cores{' (resumed)' if earlier is not None else ''}, as long "
                 "as the export trained (search.baseline.budget: equal)")
    told = exploit.order(config, baseline, results, left, setup.plan, time.time(),
                         config.resources.cpus_per_trial / trial_cpus if trial_cpus else 1.0, from_checkpoint=False)
    context = exploit.continuation_context(setup.context, config, told)
    recorder = TrialEndRecorder(tracking_uri, context, 1, console.trial_event(config.search.metric))
    here = TuneSetup(context, setup.storage, experiment, setup.precisions, [recorder], setup.plan)
    started = time.time()
    tuner = restore_tuner(config, here, path) if earlier is not None else exploit.make_tuner(
        config, here, recipe(baseline), EqualTimeTrialName())
    ran = tuner.fit()
    recorder.close_unfinished("stopped_by_time_budget")
    return _ended(config, record, ran, trained + time.time() - started)


def _ended(config: SweepConfig, record: dict[str, Any], ran, trained: float) -> dict[str, Any]:
    """The run's record: its best evaluation's checkpoint (Best.as_dict, the export's rule), or why there is none."""
    own = pick_best(ran, config.search.metric, config.search.mode)
    why = None if own else (failure(ran) or "it reported no evaluation")
    return {**record, "trained_seconds": round(trained, 1), "checkpoint": own.as_dict() if own else None,
            **({"why": why} if why else {})}
