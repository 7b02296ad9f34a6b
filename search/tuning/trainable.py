"""The Ray Tune trainable: turns sampled parameters into a TrialPlan, runs it, reports to Tune and MLflow.

It receives plain data only (the sweep as a dict, paths, run ids), never the controller's objects,
so it runs the same in a local Ray and on a cluster's workers.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import EXPLOIT_TAG, TRIAL_TAG
from finesweep.search.tuning import exploit
from finesweep.search.tuning.context import TrialContext, build_plan
from finesweep.search.tuning.distributed import run_data_parallel
from finesweep.search.tuning.scratch import copy_checkpoint, scratch_dir
from finesweep.search.tuning.sink import final_failure, record_end, sink_for
from finesweep.spaces import SweepConfig
from finesweep.trainer.trial import train


def run_trial(params: dict[str, Any], context: TrialContext) -> None:
    """Ray Tune function trainable for one trial."""
    from ray import tune

    trial = tune.get_context()
    tracker = Tracker(context.tracking_uri, context.spool_dir or None)
    tags = {TRIAL_TAG: trial.get_trial_id(), **({EXPLOIT_TAG: params[exploit.EXPLOIT_KEY]}
                                                 if params.get(exploit.EXPLOIT_KEY) else {})}
    run_id = tracker.trial_run(context.experiment_id, context.parent_run_id, trial.get_trial_id()) or tracker.start_run(
        context.experiment_id, trial.get_trial_name(), tags, context.parent_run_id)
    try:
        config = SweepConfig.model_validate(context.sweep)
        if config.resources.workers_per_trial > 1:
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
    from ray import tune
    from ray.tune import Checkpoint

    output_dir = scratch_dir(tune.get_context().get_trial_id())
    try:
        restored = _restored_checkpoint(output_dir, context)
        plan = build_plan(params, context, str(output_dir), restored)
        if context.exploitation:
            plan = exploit.trial_plan(plan, context.exploitation, restored,
                                      lambda source: copy_checkpoint(Checkpoint.from_directory(source), output_dir))
        tracker.log_params(run_id, plan.params())
        sink = sink_for(plan, tracker, run_id, (config.search.metric, config.search.mode))
        try:
            train(plan, sink)
        finally:
            sink.flush()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)


def _restored_checkpoint(output_dir: Path, context: TrialContext) -> str | None:
    """The trial's last checkpoint when Tune restarts it (worker lost, sweep resumed), copied locally: the last one
    Tune registered, else one of its own the resume found on disk that Tune had not registered yet."""
    from ray import tune

    checkpoint = tune.get_checkpoint()
    own = (context.resume_checkpoints or {}).get(tune.get_context().get_trial_id())
    if checkpoint is None and own and Path(own).is_dir():
        checkpoint = tune.Checkpoint.from_directory(own)
    return copy_checkpoint(checkpoint, output_dir)
