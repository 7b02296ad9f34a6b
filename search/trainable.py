"""The Ray Tune trainable: turns sampled parameters into a TrialPlan, runs it, reports to Tune and MLflow.

It receives plain data only (the sweep as a dict, paths, run ids), never the controller's objects,
so it runs the same in a local Ray and on a cluster's workers.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from finesweep.search.best import BEST_SO_FAR, CHECKPOINT_SCORE, best_of, checkpoint_score
from finesweep.search.probe import combination_key
from finesweep.search.tracking import END_STATE_TAG, ERROR_TAG, RESUMED_TAG, TRIAL_TAG, Tracker
from finesweep.spaces import SweepConfig
from finesweep.trainer.trial import TrialPlan, plan_batches


@dataclass(frozen=True)
class TrialContext:
    """What every trial of a sweep shares."""

    sweep: dict[str, Any]  # SweepConfig.model_dump(mode="json")
    tokenized: dict[str, str]  # model name -> tokenized splits folder
    label_names: list[str] | None
    micro_batches: dict[str, int]  # combination_key -> micro-batch the probe chose (it fits the budget)
    eval_batches: dict[str, int]  # combination_key -> evaluation batch that fits
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    # Where tracking writes wait while the server is down (tracking-spool/ in the sweep folder). A local Ray shares
    # the disk; on a multi-node cluster each node keeps its own spool under this path and sync runs where it is.
    spool_dir: str = ""


def local_batches(params: dict[str, Any], context: TrialContext) -> tuple[int, int]:
    """(micro-batch, evaluation batch) the probe found for this process's device; 0 when none fits. The probe table
    is per device kind today; each data-parallel rank looks up its own and the ranks agree on the minimum."""
    key = combination_key(params["model"], params["precision"], params["method"])
    micro = context.micro_batches.get(key, 0)
    return micro, context.eval_batches.get(key) or micro


def build_plan(params: dict[str, Any], context: TrialContext, output_dir: str, resume_from: str | None = None,
               devices: int = 1, batches: tuple[int, int] | None = None) -> TrialPlan:
    """The trial's full recipe from Optuna's sample and the sweep's shared context. A data-parallel rank passes the
    world size as `devices` and the (micro, eval) batches all ranks agreed on; otherwise this device's are used."""
    config = SweepConfig.model_validate(context.sweep)
    max_micro, eval_batch = batches or local_batches(params, context)
    if max_micro < 1:
        key = combination_key(params["model"], params["precision"], params["method"])
        raise MemoryError(f"{key}: the memory probe found no micro-batch that fits the budget")
    return TrialPlan(
        candidate=config.candidate(params["model"]).model_dump(),
        task=config.data.task.value,
        label_names=context.label_names,
        tokenized_dir=context.tokenized[params["model"]],
        output_dir=output_dir,
        precision=params["precision"],
        method=params["method"],
        learning_rate=float(params["learning_rate"]),
        weight_decay=float(params["weight_decay"]),
        warmup_ratio=float(params["warmup_ratio"]),
        batch=plan_batches(int(params["effective_batch_size"]), max_micro, devices),
        eval_batch=eval_batch,
        max_steps=config.search.max_steps,
        eval_every_steps=config.search.eval_every_steps,
        seed=config.seed,
        threads=int(config.resources.cpus_per_trial),
        trust_remote_code=config.trust_remote_code,
        resume_from=resume_from,
        lora_r=params.get("lora_r"),
        lora_alpha=params.get("lora_alpha"),
        lora_dropout=config.space.lora_dropout,
        deepspeed_stage=config.resources.deepspeed_stage,
    )


class TuneMlflowSink:
    """Sends each evaluation to Tune (with its checkpoint) and to the trial's MLflow run."""

    def __init__(self, tracker: Tracker, run_id: str, objective: tuple[str, str], logged_through: int = 0,
                 trained_through: int = 0, best_so_far: float = math.nan):
        self.tracker, self.run_id = tracker, run_id
        self.metric, self.mode = objective
        self.best_so_far = best_so_far  # a resumed trial's starts from the evaluations before its checkpoint
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
        self.best_so_far = best_of([self.best_so_far, value], self.mode)
        score = checkpoint_score(value, step, self.mode)
        self.report({**metrics, "step": step, "mlflow_run_id": self.run_id, CHECKPOINT_SCORE: score,
                     BEST_SO_FAR: self.best_so_far}, checkpoint_dir)

    def flush(self) -> None:
        """Send what waits (also at the end of a trial: the losses after its last evaluation, a diverged one's)."""
        if self.pending:
            rows, self.pending = self.pending, []
            self.tracker.log_metric_rows(self.run_id, rows)

    def report(self, result: dict[str, Any], checkpoint_dir: Path) -> None:
        """To Tune, with the checkpoint (Tune copies it into the sweep's storage and ranks it)."""
        import shutil

        from ray import tune

        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))
        # The copy in the sweep's storage is made before report returns, and the Trainer never reads its own again.
        # Kept, it would stay in Ray's session folder (cleared only at reboot): model and optimizer state per trial,
        # the last of every trial that Tune stops, since a stopped trial's process ends with no clean-up of its own.
        shutil.rmtree(checkpoint_dir, ignore_errors=True)


def run_trial(params: dict[str, Any], context: TrialContext) -> None:
    """Ray Tune function trainable for one trial."""
    from ray import tune

    trial = tune.get_context()
    tracker = Tracker(context.tracking_uri, context.spool_dir or None)
    run_id = tracker.trial_run(context.experiment_id, context.parent_run_id, trial.get_trial_id()) or tracker.start_run(
        context.experiment_id, trial.get_trial_name(), {TRIAL_TAG: trial.get_trial_id()}, context.parent_run_id)
    try:
        config = SweepConfig.model_validate(context.sweep)
        if config.resources.workers_per_trial > 1:
            from finesweep.search.distributed import run_data_parallel

            run_data_parallel(params, context, run_id)  # this process only drives the Ray Train workers
        else:
            train_in_this_process(params, context, config, tracker, run_id)
    except Exception as error:
        state = final_failure(error)
        record_end(tracker, run_id, state or "failed", f"{type(error).__name__}: {error}")
        if state is None:
            raise  # Tune retries it (FailureConfig); past the retries the trial ends as an error
        return  # diverged or out of memory: the same configuration would fail the same way again
    record_end(tracker, run_id, "completed", None)


def train_in_this_process(params: dict[str, Any], context: TrialContext, config: SweepConfig, tracker: Tracker,
                          run_id: str) -> None:
    """A single-process trial. The Trainer writes its checkpoints to a scratch folder, removed when the trial ends:
    what Tune keeps is in the sweep's storage, and a retry restores from there."""
    import shutil

    from ray import tune

    from finesweep.trainer.trial import train

    output_dir = scratch_dir(tune.get_context().get_trial_id())
    try:
        plan = build_plan(params, context, str(output_dir), _restored_checkpoint(output_dir))
        tracker.log_params(run_id, plan.params())
        sink = sink_for(plan, tracker, run_id, (config.search.metric, config.search.mode))
        try:
            train(plan, sink)
        finally:
            sink.flush()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)


def final_failure(error: BaseException) -> str | None:
    """The end state of a failure that retrying cannot cure, or None for one that a retry might."""
    from finesweep.trainer.trial import BatchSplitError, DivergedError

    if isinstance(error, DivergedError):
        return "diverged"
    if isinstance(error, BatchSplitError):
        return "batch_not_divisible"
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower():
        return "out_of_memory"
    return None


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
                      best_so_far=best_of(earlier, objective[1]))


def _restored_checkpoint(output_dir: Path) -> str | None:
    """The trial's last reported checkpoint when Tune restarts it (worker lost, sweep resumed), copied locally."""
    from ray import tune

    return copy_checkpoint(tune.get_checkpoint(), output_dir)


SCRATCH_PREFIX = "finesweep-"  # scratch_dir names the folder so; the sweep's end finds it by it


def scratch_dir(name: str) -> Path:
    """Where the Trainer writes its own checkpoints: under the process's working directory, which Tune and Ray Train
    make a per-trial folder on the worker's node that is never uploaded. Not the trial dir: Tune uploads that with its
    experiment state (every second here), and each upload copied every checkpoint the Trainer had at that moment
    into the sweep folder (5 GB for the example). What the sweep keeps is what the trial reports (CheckpointConfig)."""
    return Path.cwd() / f"{SCRATCH_PREFIX}{name}"


def remove_scratch_left_here(tune_experiment: str) -> None:
    """Once Tune is done: the trials' scratch folders still on this node (the driver's) in Ray's session folder. A
    trial killed while saving a checkpoint (the time budget, a lost worker) leaves that half-written checkpoint
    there, and Ray clears session folders only at reboot. Other nodes of a cluster keep theirs."""
    import shutil

    from ray.train.constants import _get_ray_train_session_dir  # where Ray puts trials' working dirs (ray 2.60)

    for folder in Path(_get_ray_train_session_dir()).glob(f"*/{tune_experiment}/working_dirs/*/{SCRATCH_PREFIX}*"):
        shutil.rmtree(folder, ignore_errors=True)


def copy_checkpoint(checkpoint, output_dir: Path) -> str | None:
    """A restored Ray checkpoint copied next to the trial's output, where the Trainer resumes from it; None for none."""
    import shutil

    if checkpoint is None:
        return None
    local = output_dir / "resumed-checkpoint"
    shutil.rmtree(local, ignore_errors=True)
    checkpoint.to_directory(str(local))
    return str(local)


def record_end(tracker: Tracker, run_id: str, state: str, message: str | None) -> None:
    """Closes the trial's MLflow run with its end state (completed, diverged, out_of_memory, failed...)."""
    tags = {END_STATE_TAG: state}
    if message:
        tags[ERROR_TAG] = message
    tracker.set_tags(run_id, tags)
    tracker.finish(run_id, "FINISHED" if state == "completed" else "FAILED")
