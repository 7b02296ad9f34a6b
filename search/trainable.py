"""The Ray Tune trainable: turns sampled parameters into a TrialPlan, runs it, reports to Tune and MLflow.

It receives plain data only (the sweep as a dict, paths, run ids), never the controller's objects,
so it runs the same in a local Ray and on a cluster's workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finesweep.search.probe import combination_key
from finesweep.search.tracking import END_STATE_TAG, TRIAL_TAG, Tracker
from finesweep.spaces import SweepConfig
from finesweep.trainer.trial import TrialPlan, plan_batches

ERROR_TAG = "finesweep.error"


@dataclass(frozen=True)
class TrialContext:
    """What every trial of a sweep shares."""

    sweep: dict[str, Any]  # SweepConfig.model_dump(mode="json")
    tokenized: dict[str, str]  # model name -> tokenized splits folder
    label_names: list[str] | None
    micro_batches: dict[str, int]  # combination_key -> largest micro-batch that fits
    tracking_uri: str
    experiment_id: str
    parent_run_id: str


def build_plan(params: dict[str, Any], context: TrialContext, output_dir: str) -> TrialPlan:
    """The trial's full recipe from Optuna's sample and the sweep's shared context."""
    config = SweepConfig.model_validate(context.sweep)
    key = combination_key(params["model"], params["precision"], params["method"])
    max_micro = context.micro_batches.get(key, 0)
    if max_micro < 1:
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
        batch=plan_batches(int(params["effective_batch_size"]), max_micro),
        max_steps=config.search.max_steps,
        eval_every_steps=config.search.eval_every_steps,
        seed=config.seed,
        threads=int(config.resources.cpus_per_trial),
        trust_remote_code=config.trust_remote_code,
        lora_r=params.get("lora_r"),
        lora_alpha=params.get("lora_alpha"),
        lora_dropout=config.space.lora_dropout,
    )


class TuneMlflowSink:
    """Sends each evaluation to Tune (with its checkpoint) and to the trial's MLflow run."""

    def __init__(self, tracker: Tracker, run_id: str, samples_per_step: int):
        self.tracker, self.run_id = tracker, run_id
        self.samples_per_step = samples_per_step
        self.started = time.perf_counter()

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        self.tracker.log_metrics(self.run_id, metrics, step)

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        from ray import tune

        elapsed = time.perf_counter() - self.started
        metrics = {**metrics, "train_samples_per_second_so_far": step * self.samples_per_step / max(elapsed, 1e-9)}
        self.tracker.log_metrics(self.run_id, metrics, step)
        tune.report({**metrics, "step": step, "mlflow_run_id": self.run_id},
                    checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))


def run_trial(params: dict[str, Any], context: TrialContext) -> None:
    """Ray Tune function trainable for one trial."""
    from ray import tune

    from finesweep.trainer.trial import DivergedError, train

    trial = tune.get_context()
    tracker = Tracker(context.tracking_uri)
    run_id = tracker.trial_run(context.experiment_id, context.parent_run_id, trial.get_trial_id()) or tracker.start_run(
        context.experiment_id, trial.get_trial_name(), {TRIAL_TAG: trial.get_trial_id()}, context.parent_run_id)
    try:
        plan = build_plan(params, context, str(Path(trial.get_trial_dir()) / "hf"))
        tracker.log_params(run_id, plan.params())
        train(plan, TuneMlflowSink(tracker, run_id, plan.batch.effective))
    except DivergedError as error:
        _record_end(tracker, run_id, "diverged", str(error))
        raise
    except MemoryError as error:
        _record_end(tracker, run_id, "out_of_memory", str(error))
        raise
    except Exception as error:
        state = "out_of_memory" if "out of memory" in str(error).lower() else "failed"
        _record_end(tracker, run_id, state, f"{type(error).__name__}: {error}")
        raise
    _record_end(tracker, run_id, "completed", None)


def _record_end(tracker: Tracker, run_id: str, state: str, message: str | None) -> None:
    tags = {END_STATE_TAG: state}
    if message:
        tags[ERROR_TAG] = message
    tracker.set_tags(run_id, tags)
    tracker.finish(run_id, "FINISHED" if state == "completed" else "FAILED")
