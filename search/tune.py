"""Ray Tune wiring: OptunaSearch (TPE, random or grid) samples, ASHA stops, Tune runs and checkpoints."""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from optuna.samplers import GridSampler
from ray.tune import Callback, Stopper

from finesweep.search.best import BEST_SO_FAR, CHECKPOINT_SCORE
from finesweep.search.pareto import search_objectives
from finesweep.search.recovery import recover_lost_checkpoints
from finesweep.search.trainable import TrialContext, run_trial
from finesweep.search.tracking import END_STATE_TAG, ERROR_TAG, Tracker
from finesweep.spaces import SweepConfig, suggest
from finesweep.spaces.grid import distinct, grid

log = logging.getLogger(__name__)


def start_ray(address: str | None) -> None:
    """Join the cluster at `address`, or start a local Ray bound to 127.0.0.1."""
    import ray

    if ray.is_initialized():
        return
    if address is None:
        # A local Ray bound to 127.0.0.1 is reachable from this machine only; its token adds nothing.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address:
        check_reachable(address)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1",
                 logging_level=logging.WARNING, log_to_driver=False)


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once, clearly, when nothing listens at a HOST:PORT address (Ray itself would retry for minutes)."""
    import socket

    from finesweep.spaces import SweepFileError

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise SweepFileError(
            f"--address {address}: no Ray cluster answers there ({error}). Start one on that machine with "
            "`ray start --head --port PORT`, check the host and port (the head's GCS port, 6379 by default), or "
            "leave --address out to run a local Ray.") from None


class DistinctGridSampler(GridSampler):
    """Optuna's GridSampler over the grid's distinct configurations only, without its stop at the end.

    GridSampler runs the whole product of the grid's values. A trial that never asks for a conditional dimension
    (lora_r, lora_alpha under full fine-tuning) would train the same configuration once per value of it, so the
    product is narrowed to the points `spaces.grid.distinct` keeps. GridSampler's `study.stop()` after the last
    point works only inside `study.optimize`; under Ray Tune (ask and tell) it raises, and Tune's num_samples
    (capped at the grid's size) ends the search anyway. Module level: Tune pickles the searcher with its sampler.
    """

    def __init__(self, values: dict[str, list[Any]], seed: int):
        super().__init__(values, seed=seed)
        # GridSampler keeps the product, shuffled by the seed, in _all_grids (each tuple in _param_names order);
        # a trial's grid id indexes that list, and _n_min_trials is its length (optuna 5.0).
        kept = [g for g in self._all_grids if distinct(dict(zip(self._param_names, g)), values)]
        self._all_grids, self._n_min_trials = kept, len(kept)

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_searcher(config: SweepConfig, precisions: list[str]):
    """Optuna through Ray Tune: multivariate TPE (seeded), or random or grid search as a baseline."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if config.search.algorithm == "tpe":
        # TPE samples at random for its first n_startup_trials (10 by default); a sweep of a handful of
        # trials would never leave that phase, so a third of the budget is random and the rest is TPE. With a step
        # budget, num_trials is only a ceiling: the trials the budget pays for (at full length) are the budget.
        startup = min(10, max(2, planned_trials(config) // 3))
        sampler = optuna.samplers.TPESampler(seed=config.seed, multivariate=True, n_startup_trials=startup)
    elif config.search.algorithm == "grid":
        values = grid(config.space, config.model_names, precisions, config.search.grid_points)
        sampler = DistinctGridSampler(values, seed=config.seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=config.seed)
    space = functools.partial(suggest, space=config.space, models=config.model_names, precisions=precisions)
    # With a second objective, metric and mode are lists and the study has two directions (TPE, random and grid
    # all sample for it). OptunaSearch then tells each trial's LAST result, [metric, throughput], when the trial
    # ends (it skips intermediate reports for several objectives); the throughput there is the trial's own average.
    metric, mode = search_objectives(config.search)
    return OptunaSearch(space=space, sampler=sampler, metric=metric, mode=mode,
                        points_to_evaluate=[dict(p) for p in config.search.initial_points] or None)


def planned_trials(config: SweepConfig) -> int:
    """How many trials the sweep expects to run: num_trials, or fewer when a step budget pays for fewer."""
    search = config.search
    if search.step_budget is None:
        return search.num_trials
    return max(1, min(search.num_trials, search.step_budget // search.max_steps))


def make_scheduler(config: SweepConfig):
    """ASHA over evaluations (each report is one evaluation), or none."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if config.search.scheduler == "none":
        return FIFOScheduler()
    evaluations = max(1, config.search.max_steps // config.search.eval_every_steps)
    return ASHAScheduler(time_attr="training_iteration", max_t=evaluations,
                         grace_period=min(config.search.asha.grace_period, evaluations),
                         reduction_factor=config.search.asha.reduction_factor)


def trial_name(trial) -> str:
    """Short, stable names (Tune's default puts every parameter in the folder name)."""
    return f"trial-{trial.trial_id}"


@dataclass
class TuneSetup:
    """Everything a Tuner for this sweep needs besides the config."""

    context: TrialContext
    storage: Path
    experiment_name: str
    precisions: list[str]
    callbacks: list[Any]


def _tune_environment() -> None:
    """Tune settings that are environment variables, read by the controller when the Tuner is built."""
    # Tune writes its experiment state (which checkpoint each trial has) every few seconds at best by default;
    # a controller killed in between would restart trials from older checkpoints. The state is small: save it
    # every second.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    # A trial that ends before its first evaluation (diverged at step 1, out of memory) reports no metric;
    # Tune's strict check would abort the whole sweep for it. It is recorded in MLflow and pruned in Optuna.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")


def make_trainable(config: SweepConfig, context: TrialContext):
    """run_trial with the sweep's shared context and per-trial resources attached (a data-parallel trial's workers
    reserve theirs through Ray Train; the trial itself then only drives them: see search/distributed.py)."""
    from ray import tune

    trainable = tune.with_parameters(run_trial, context=context)
    resources = {"cpu": config.resources.cpus_per_trial, "gpu": config.resources.gpus_per_trial}
    if config.resources.workers_per_trial > 1:
        from finesweep.search.distributed import DRIVER_RESOURCES, data_parallel_trainable

        trainable, resources = data_parallel_trainable(trainable), DRIVER_RESOURCES
    return tune.with_resources(trainable, resources)


def restore_tuner(config: SweepConfig, setup: TuneSetup):
    """The interrupted experiment, continued: finished trials stay finished, unfinished ones resume from their
    last checkpoint, the searcher keeps its history; failed trials stay failed (their failure is recorded)."""
    from ray import tune

    _tune_environment()
    path = setup.storage.resolve() / setup.experiment_name
    recover_lost_checkpoints(path)
    return tune.Tuner.restore(str(path), trainable=make_trainable(config, setup.context), resume_unfinished=True,
                              resume_errored=False)


def checkpoint_config(config: SweepConfig):
    """Each trial keeps its best `keep_checkpoints` evaluations (plus its latest, for a restart), ranked by the
    metric with ties to the earlier step, as pick_best ranks them: the sweep's winner is never deleted."""
    from ray import tune

    return tune.CheckpointConfig(num_to_keep=config.search.keep_checkpoints,
                                 checkpoint_score_attribute=CHECKPOINT_SCORE, checkpoint_score_order="max")


def make_tuner(config: SweepConfig, setup: TuneSetup):
    from ray import tune

    _tune_environment()
    trainable = make_trainable(config, setup.context)
    tune_config = tune.TuneConfig(
        # Tune's own metric (ASHA's, the results') is the primary one even with a second objective: ASHA ranks by
        # one metric. OptunaSearch keeps the objectives it was built with (it ignores these once it has a space).
        # Both judge a trial by its best evaluation so far (BEST_SO_FAR): the export picks over all evaluations.
        metric=BEST_SO_FAR, mode=config.search.mode,
        search_alg=make_searcher(config, setup.precisions), scheduler=make_scheduler(config),
        num_samples=config.search.num_trials, max_concurrent_trials=config.search.max_concurrent_trials,
        time_budget_s=config.search.time_budget_minutes * 60 if config.search.time_budget_minutes else None,
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
        # Tune's own time_budget_s is a Stopper too; both end the experiment the same way, whichever fires first.
        stop=StepBudgetStopper(config.search.step_budget, setup.storage.resolve() / setup.experiment_name / STEP_LEDGER)
        if config.search.step_budget else None,
    )
    return tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)


STEP_LEDGER = "step_budget.json"


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
            self.ledger.parent.mkdir(parents=True, exist_ok=True)
            partial = self.ledger.with_suffix(".partial")
            partial.write_text(json.dumps(self.steps))
            partial.replace(self.ledger)  # a crash mid-write leaves the previous ledger whole
        return False  # single trials are ASHA's to stop; the budget ends them all at once

    def stop_all(self) -> bool:
        return self.spent >= self.budget


def budget_end_state(config: SweepConfig, results) -> str:
    """The end state of the trials the search stopped without a completion event: which budget ended it."""
    budget = config.search.step_budget
    spent = sum(int(r.metrics.get("step") or 0) for r in results if r.metrics)
    return "stopped_by_step_budget" if budget and spent >= budget else "stopped_by_time_budget"


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
        done = trial.last_result.get("training_iteration", 0)
        state = "completed" if done >= self.max_evaluations else f"stopped_early_at_step_{trial.last_result.get('step')}"
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

