"""The Tuner of a sweep, new or restored: trainable and resources, searcher, scheduler, checkpoints, callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from finesweep.search.budget.pace import TrialTimes
from finesweep.search.budget.plan import SearchPlan
from finesweep.search.selection.best import BEST_SO_FAR, CHECKPOINT_SCORE, search_trial_name
from finesweep.search.tuning.callbacks import STEP_LEDGER, PlateauStopper, StepBudgetStopper, TrialsShareStopper
from finesweep.search.tuning.context import TrialContext
from finesweep.search.tuning.distributed import DRIVER_RESOURCES, data_parallel_trainable
from finesweep.search.tuning.moved import install_old_module_paths
from finesweep.search.tuning.ray_cluster import tune_environment
from finesweep.search.tuning.recovery import recover_lost_checkpoints, set_aside_cut_state, unregistered_checkpoints
from finesweep.search.tuning.samplers import make_scheduler, make_searcher
from finesweep.search.tuning.trainable import run_trial
from finesweep.search.tuning.trials_share import SHARE_LEDGER, TrialStartGate
from finesweep.spaces import SweepConfig


def trial_name(trial) -> str:
    """Short, stable names (Tune's default puts every parameter in the folder name)."""
    return search_trial_name(trial.trial_id)


@dataclass
class TuneSetup:
    """Everything a Tuner for this sweep needs besides the config."""

    context: TrialContext
    storage: Path
    experiment_name: str
    precisions: list[str]
    callbacks: list[Any]
    plan: SearchPlan  # the trials' number, length and seconds (search/budget/plan.py)
    trial_times: dict[str, TrialTimes] = field(default_factory=dict)  # the plan's, per combination (budget/pace.py)


def make_trainable(config: SweepConfig, context: TrialContext):
    """run_trial with the sweep's shared context and per-trial resources attached (a data-parallel trial's workers
    reserve theirs through Ray Train; the trial itself then only drives them: see distributed.py)."""
    from ray import tune

    trainable = tune.with_parameters(run_trial, context=context)
    # Both are resolved by the sweep before the search (search/probe/sharing.py); unset means none here.
    resources = {"cpu": config.resources.cpus_per_trial, "gpu": config.resources.gpus_per_trial or 0}
    if config.resources.workers_per_trial > 1:
        trainable, resources = data_parallel_trainable(trainable), DRIVER_RESOURCES
    return tune.with_resources(trainable, resources)


def restore_tuner(config: SweepConfig, setup: TuneSetup, path: Path | None = None):
    """The interrupted experiment, continued: finished trials stay finished, unfinished ones resume from their
    last checkpoint (one Tune deleted after its last state save replaced first, one it had not registered yet given
    to the trial, state files a crash cut short set aside: recovery.py), the searcher keeps its history; failed
    trials stay failed (their failure is recorded). `path`: another experiment of the sweep (the winner's
    continuation, search/tuning/exploit.py) instead of the search's."""
    from ray import tune

    tune_environment()
    install_old_module_paths()  # a sweep started before finesweep's modules moved saved their old paths
    path = path or setup.storage.resolve() / setup.experiment_name
    set_aside_cut_state(path)
    recover_lost_checkpoints(path)
    context = replace(setup.context, resume_checkpoints=unregistered_checkpoints(path))
    return tune.Tuner.restore(str(path), trainable=make_trainable(config, context), resume_unfinished=True,
                              resume_errored=False)


def checkpoint_config(config: SweepConfig):
    """Each trial keeps its best `keep_checkpoints` evaluations (plus its latest, for a restart), ranked by the
    metric with ties to the earlier step, as pick_best ranks them: the sweep's winner is never deleted."""
    from ray import tune

    return tune.CheckpointConfig(num_to_keep=config.search.keep_checkpoints,
                                 checkpoint_score_attribute=CHECKPOINT_SCORE, checkpoint_score_order="max")


def stoppers(config: SweepConfig, plan: SearchPlan, experiment: Path, times: dict[str, TrialTimes] | None = None):
    """What ends the whole search: the trials' share of the time budget (the rest trains the winner, exploit.py)
    and the step budget, whichever comes first; and what ends one trial besides ASHA: its plateau, and a next
    evaluation the share could not pay for (`times`: the plan's, per combination)."""
    from ray.tune.stopper import CombinedStopper

    search = config.search
    ends = []
    if search.step_budget:  # first: CombinedStopper asks in order and stops at the first yes, and it counts every
        ends.append(StepBudgetStopper(search.step_budget, experiment / STEP_LEDGER))  # result (it never says yes)
    if plan.trials_seconds is not None:
        ends.append(TrialsShareStopper(plan.trials_seconds, plan.budget_seconds, experiment / SHARE_LEDGER, times))
    if search.plateau_patience:
        ends.append(PlateauStopper(search.plateau_patience))
    return CombinedStopper(*ends) if len(ends) > 1 else (ends[0] if ends else None)


def gated_searcher(config: SweepConfig, plan: SearchPlan, precisions: list[str], experiment: Path,
                   times: dict[str, TrialTimes] | None = None):
    """The sweep's searcher; under a time budget, behind the gate that starts no trial the trials' share could not
    take to a first evaluation (trials_share.py; `times`: the plan's, per combination)."""
    optuna_search = make_searcher(config, plan, precisions)
    if plan.trials_seconds is None:
        return optuna_search
    return TrialStartGate(optuna_search, experiment / SHARE_LEDGER, times or {})


def make_tuner(config: SweepConfig, setup: TuneSetup):
    from ray import tune

    tune_environment()
    trainable = make_trainable(config, setup.context)
    experiment = setup.storage.resolve() / setup.experiment_name
    tune_config = tune.TuneConfig(
        # Tune's own metric (ASHA's, the results') is the primary one even with a second objective: ASHA ranks by
        # one metric. OptunaSearch keeps the objectives it was built with (it ignores these once it has a space).
        # Both judge a trial by its best evaluation so far (BEST_SO_FAR): the export picks over all evaluations.
        metric=BEST_SO_FAR, mode=config.search.mode,
        search_alg=gated_searcher(config, setup.plan, setup.precisions, experiment, setup.trial_times),
        scheduler=make_scheduler(config, setup.plan),
        num_samples=setup.plan.num_trials, max_concurrent_trials=config.search.max_concurrent_trials or 1,
        # A reused worker has transformers imported already: about 9 s saved per trial on a CPU machine. A data-parallel
        # trial's driver cannot be reused: Tune stops it (ASHA) while it still waits on its Ray Train run.
        reuse_actors=config.resources.workers_per_trial == 1, trial_name_creator=trial_name,
        trial_dirname_creator=trial_name,
    )
    run_config = tune.RunConfig(
        name=setup.experiment_name, storage_path=str(setup.storage.resolve()),
        checkpoint_config=checkpoint_config(config),
        # A trial whose worker dies (killed, node lost) or that raises restarts from its last checkpoint, twice
        # at most; diverged and out-of-memory trials end themselves, recorded and not retried (see run_trial).
        failure_config=tune.FailureConfig(max_failures=2),
        callbacks=setup.callbacks, verbose=0,
        stop=stoppers(config, setup.plan, experiment, setup.trial_times),
    )
    return tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)
