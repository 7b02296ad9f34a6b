"""Every MLflow tag name finesweep writes or reads: one place, so a reader and a writer never disagree."""

PARENT_TAG = "mlflow.parentRunId"  # the tag the MLflow UI nests runs by
GIT_COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own: the UI shows it as the run's source version

# The sweep's parent run
KIND_TAG = "finesweep.kind"
PYTHON_TAG = "finesweep.python"
DEVICE_TAG = "finesweep.device"
GIT_DIRTY_TAG = "finesweep.git_dirty"
OUTCOME_TAG = "finesweep.outcome"
BEST_RUN_TAG = "finesweep.best_run_id"
BASELINE_TRIAL_TAG = "finesweep.baseline_trial"  # the trial that trained search.baseline's recipe
# How the export's and the baseline's test scores stand: equal_time, unequal or same_checkpoint (selection/baseline.py)
BASELINE_FOOTING_TAG = "finesweep.baseline_footing"
BEST_STEP_TAG = "finesweep.best_step"
BEST_TRIAL_TAG = "finesweep.best_trial"
RULE_TAG = "finesweep.pick_rule"
PICK_TAG = "finesweep.pick"
DEPLOY_TAG = "finesweep.deploy_variant"  # the export variant to serve: fastest within export.max_metric_drop
EXPORT_COMPLETE_TAG = "finesweep.export_complete"  # "false" where a variant of export.quantization could not be made
DEPLOY_CPU_TAG = "finesweep.deploy_variant_cpu"  # the same on the CPU, where a GPU machine timed the variants there too

# Each trial's nested run
TRIAL_TAG = "finesweep.trial_id"
END_STATE_TAG = "finesweep.end_state"
ERROR_TAG = "finesweep.error"
RESUMED_TAG = "finesweep.resumed_from_step"
EXPLOIT_TAG = "finesweep.exploit_of"  # on the run that trained the search's winner further: the trial it continued
SPOOL_ID_TAG = "finesweep.spool_id"  # on a run created by sync: its placeholder, so a second sync finds it

# Registered model versions
VARIANT_TAG = "finesweep.variant"
