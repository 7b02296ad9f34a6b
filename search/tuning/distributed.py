"""Data-parallel trials: a Ray Tune trial that drives a Ray Train worker group, one torch.distributed rank a worker.

Only trials with resources.workers_per_trial > 1 come here; a single-worker trial trains inside the Tune trial's
own process (search/tuning/trainable.py), with no Ray Train in between.

The layout is Ray's own Train-inside-Tune design (Ray Train V2, "Hyperparameter Tuning with Ray Tune"):
- the Tune trial is only the driver: it reserves no CPU or GPU (`driver_resources`), starts a `TorchTrainer`
  whose workers each reserve cpus_per_trial / gpus_per_trial, and waits;
- every worker runs the same HF Trainer recipe (trainer.trial.train); Ray Train has set up the process group
  (gloo on CPU, nccl on GPU) and the torchrun-style environment, which the Trainer (through accelerate) joins;
- the ranks agree on the micro-batch, the minimum of each rank's own probe result (`agreed_minimum`);
- rank 0 logs to the trial's MLflow run; at each evaluation every rank reports its part of the checkpoint to
  Ray Train, which merges the parts into one folder in the trial's storage, keeps the best `keep_checkpoints` (and
  the latest) by the same score Tune ranks single-process trials by, and restores the latest when the trial
  restarts (same storage path and run name);
- Ray Train's TuneReportCallback hands rank 0's result to Tune with the checkpoint's path (Tune itself holds no
  checkpoint of these trials): ASHA sees each evaluation, and best.pick_best reads Ray Train's kept checkpoints.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# This module runs only where Ray runs (Tune trials, Ray Train workers); it is imported lazily by the controller.
from ray.air.constants import TRAINING_ITERATION

from finesweep.search.selection.best import CHECKPOINT_SCORE
from finesweep.search.tracking.client import Tracker
from finesweep.search.tuning import ray_compat
from finesweep.search.tuning.context import TrialContext, build_plan, local_batches
from finesweep.search.tuning.scratch import copy_checkpoint, scratch_dir
from finesweep.search.tuning.sink import TuneMlflowSink, sink_for
from finesweep.spaces import SweepConfig
from finesweep.spaces.config import ResourcesConfig
from finesweep.trainer.trial import plan_batches, train

# What a data-parallel trial (the driver of its workers, which reserve cpus_per_trial and gpus_per_trial each)
# reserves: no CPU, only some of Ray's logical memory resource, which every node has. Tune refuses a request of no
# resource at all, and any CPU fraction would leave a machine whose cores the workers fill (2 workers x 1 CPU on 2
# cores) unable to start them.
DRIVER_RESOURCES = {"cpu": 0, "gpu": 0, "memory": 256 * 2**20}
TRAIN_RUN_PREFIX = "train-"  # Ray Train's run folder inside the Tune trial's folder: train-<trial id>


def worker_resources(resources: ResourcesConfig) -> dict[str, float]:
    """One Ray Train worker's share: what a single-process trial gets."""
    wanted = {"CPU": resources.cpus_per_trial, "GPU": resources.gpus_per_trial or 0}
    return {name: amount for name, amount in wanted.items() if amount > 0}


def data_parallel_trainable(trainable: Callable) -> Callable:
    """The Tune function trainable of a data-parallel sweep: its trial actors stop their Ray Train run first when Tune
    stops them."""
    return ray_compat.add_actor_mixin(trainable, StopsTrainRun)


class StopsTrainRun:
    """Mixin of a data-parallel trial's Tune actor. Tune stops a trial (ASHA, the budget, the end of the search) by
    ending its actor, and Ray Train's controller dies with it (fate sharing) without releasing the placement group
    it reserved for the workers: their CPUs and GPUs would stay taken until the sweep ends (Ray Train's cleaner of
    orphaned groups asks the Ray dashboard, which a local finesweep Ray runs without). So the run is aborted first."""

    def cleanup(self) -> None:
        abort_train_run(self.trial_id)
        super().cleanup()


@dataclass
class TrainRun:
    """The Ray Train run a Tune trial actor drives, as far as stopping it needs."""

    controllers: Any  # ray.util.queue.Queue: Ray Train's controller sends its own handle (AnnounceController)
    results: Any  # the Tune session's queue that TuneReportCallback fills
    stopping: bool = False


_RUNS: dict[str, TrainRun] = {}  # trial id -> its running Ray Train run, in the trial actor's process


def run_data_parallel(params: dict[str, Any], context: TrialContext, run_id: str) -> None:
    """Inside the Tune trial: run the trial on workers_per_trial Ray Train workers and wait for them.

    A failure of the workers is raised as the worker's own error, so that run_trial records a final one (diverged,
    out of memory) as such; anything else Tune retries, and Ray Train resumes from its latest checkpoint. A run that
    Tune stopped ends this thread as Tune ends a single-process trial's (SystemExit): its end is Tune's to record."""
    from ray import tune
    from ray.train import TrainingFailedError
    from ray.tune.integration.ray_train import TuneReportCallback
    from ray.util.queue import Queue

    config = SweepConfig.model_validate(context.sweep)
    # A batch that cannot be split over the workers fails here (BatchSplitError, recorded) before any worker starts.
    plan_batches(int(params["effective_batch_size"]), 1, config.resources.workers_per_trial)
    trial = tune.get_context()
    report = TuneReportCallback()
    # The callback's queue to Tune: a stop drains it so that the controller cannot block on it.
    run = TrainRun(controllers=Queue(1, actor_options={"num_cpus": 0}), results=ray_compat.tune_report_queue(report))
    _RUNS[trial.get_trial_id()] = run
    try:
        _trainer(config, params, context, run_id, [report, AnnounceController(run.controllers)]).fit()
    except Exception as error:
        if run.stopping:  # aborted: the controller's pending call fails with it
            raise SystemExit(0) from error
        if isinstance(error, TrainingFailedError):
            raise worker_error(error) from error
        raise
    finally:
        _RUNS.pop(trial.get_trial_id(), None)
    if run.stopping:
        raise SystemExit(0)


def _trainer(config: SweepConfig, params: dict[str, Any], context: TrialContext, run_id: str, callbacks: list):
    from ray import tune
    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trial = tune.get_context()
    storage = trial.get_storage()
    resources = config.resources
    return TorchTrainer(
        run_rank,
        train_loop_config={"params": params, "context": context, "run_id": run_id, "trial_id": trial.get_trial_id()},
        scaling_config=ScalingConfig(num_workers=resources.workers_per_trial, use_gpu=(resources.gpus_per_trial or 0) > 0,
                                     resources_per_worker=worker_resources(resources)),
        run_config=RunConfig(
            # The same storage and name when Tune restarts the trial: Ray Train then resumes from its checkpoint.
            name=f"{TRAIN_RUN_PREFIX}{trial.get_trial_id()}", storage_path=storage.trial_fs_path,
            storage_filesystem=storage.storage_filesystem,
            # Tune's ranking of a single-process trial's checkpoints (search/tuning/tuner.py checkpoint_config), in Ray Train.
            checkpoint_config=CheckpointConfig(num_to_keep=config.search.keep_checkpoints, checkpoint_score_order="max",
                                               checkpoint_score_attribute=CHECKPOINT_SCORE),
            callbacks=callbacks,
        ),
    )


class AnnounceController(ray_compat.ControllerCallback):
    """Runs in Ray Train's controller: sends the controller's handle to the trial actor, which aborts it on a stop.
    (An internal callback kind, which RunConfig(callbacks=...) accepts for such needs: see ray_compat.)"""

    def __init__(self, controllers):
        self.controllers = controllers

    def after_controller_start(self, train_run_context) -> None:
        import ray

        self.controllers.put(ray.get_runtime_context().current_actor)


def abort_train_run(trial_id: str, timeout: float = 60.0) -> None:
    """Abort the trial's Ray Train run if one is running: its controller stops the workers and releases their
    placement group. Results still on their way to Tune are dropped (the trial is stopping)."""
    import ray
    from ray.util.queue import Empty

    run = _RUNS.get(trial_id)
    if run is None:
        return
    run.stopping = True
    try:
        controller = run.controllers.get(timeout=5)
    except Empty:
        return  # no controller started: nothing reserved yet
    aborted = controller.abort.remote()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while not run.results.empty():  # a controller waiting to hand Tune a result cannot abort
            try:
                run.results.get_nowait()
            except Empty:
                break
        done, _ = ray.wait([aborted], timeout=0.2)
        if done:
            return


def worker_error(error: BaseException) -> BaseException:
    """The error a worker raised (rank 0's first), out of Ray Train's wrapping; the wrapper when there is none."""
    failures = getattr(error, "worker_failures", None) or {}
    for rank in sorted(failures):
        failure = failures[rank]
        return getattr(failure, "cause", None) or failure
    return getattr(error, "controller_failure", None) or error


def run_rank(loop: dict[str, Any]) -> None:
    """One Ray Train worker: agree on the batches, build the plan for the whole world, train."""
    import shutil

    import ray.train
    from ray.train.torch import get_device

    params, context, run_id = loop["params"], loop["context"], loop["run_id"]
    train_context = ray.train.get_context()
    rank, world = train_context.get_world_rank(), train_context.get_world_size()
    batches = agreed_minimum(local_batches(params, context), get_device())
    output_dir = scratch_dir(f"{loop['trial_id']}-rank{rank}")  # each rank saves its own part of a checkpoint
    plan = build_plan(params, context, str(output_dir), _restored_checkpoint(output_dir), devices=world,
                      batches=batches)
    search = SweepConfig.model_validate(context.sweep).search
    if rank == 0:
        tracker = Tracker(context.tracking_uri, context.spool_dir or None)
        tracker.log_params(run_id, plan.params())
        sink = sink_for(plan, tracker, run_id, (search.metric, search.mode),
                         functools.partial(RankZeroSink, eval_every_steps=plan.eval_every_steps))
    else:
        sink = PeerSink(plan.eval_every_steps)
    try:
        train(plan, sink)
    finally:
        sink.flush()
        shutil.rmtree(output_dir, ignore_errors=True)


def agreed_minimum(values: tuple[int, ...], device: Any = None) -> tuple[int, ...]:
    """Every rank's `values`, element by element, reduced to the minimum over all ranks (torch.distributed
    all_reduce MIN, a collective: every rank must call it). Each rank passes what its own device allows."""
    import torch
    import torch.distributed as dist

    agreed = torch.tensor(list(values), dtype=torch.int64, device=device or "cpu")
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return tuple(int(v) for v in agreed.tolist())


class RankZeroSink(TuneMlflowSink):
    """Rank 0: logs to the trial's MLflow run as a single-process trial does, and reports each evaluation with its
    part of the checkpoint to Ray Train (whose TuneReportCallback passes the result on to Tune)."""

    def __init__(self, *args: Any, eval_every_steps: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.eval_every_steps = eval_every_steps

    def report(self, result: dict[str, Any], checkpoint_dir: Path) -> None:
        _report_rank(result, checkpoint_dir, self.eval_every_steps)


class PeerSink:
    """Ranks above 0: nothing to MLflow; each evaluation's report (a report is a barrier: as many as rank 0's) with
    their part of the checkpoint (their RNG state)."""

    def __init__(self, eval_every_steps: int):
        self.eval_every_steps = eval_every_steps

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def flush(self) -> None:
        return None

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        _report_rank({"step": step}, checkpoint_dir, self.eval_every_steps)


def _report_rank(result: dict[str, Any], checkpoint_dir: Path, eval_every_steps: int) -> None:
    import ray.train

    step = int(result["step"])
    # Tune numbers a trial's reports itself, from 1 again when it restarts a trial that has no Tune checkpoint (these
    # have none: Ray Train holds them); the evaluation's own number keeps ASHA's rungs right across a restart.
    result = {**result, TRAINING_ITERATION: step // eval_every_steps}
    checkpoint = ray.train.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir.is_dir() else None
    # Every rank names the checkpoint the same: Ray Train merges the ranks' parts into that one folder. The rank's
    # own copy goes once uploaded (see TuneMlflowSink.report: it would stay in Ray's session folder).
    ray.train.report(result, checkpoint=checkpoint, checkpoint_dir_name=f"checkpoint-{step:07d}",
                     delete_local_checkpoint_after_upload=True)


def _restored_checkpoint(output_dir: Path) -> str | None:
    """Ray Train's latest checkpoint of this trial when it resumes (a restarted trial), copied next to the rank's
    output; None for a fresh trial."""
    import ray.train

    return copy_checkpoint(ray.train.get_checkpoint(), output_dir)
