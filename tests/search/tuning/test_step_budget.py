"""search.step_budget: the trials' training steps together end the search, cleanly, and the export still happens."""

from __future__ import annotations

import pickle

import pytest

from tests import tiny
from tests.sweeps import EVALS_PER_TRIAL, NUM_TRIALS, SWEEP, finesweep, store

BUDGET = 40
CONCURRENT = 2
EVAL_EVERY = 5


def test_the_stopper_counts_each_trials_furthest_step_and_fires_at_the_budget(tmp_path):
    from finesweep.search.tuning.callbacks import StepBudgetStopper

    stopper = StepBudgetStopper(100, tmp_path / "experiment" / "step_budget.json")
    for trial, step in (("a", 30), ("b", 30), ("a", 60), ("a", 30)):  # a restarted trial re-reports step 30
        assert stopper(trial, {"step": step, "eval_loss": 1.0}) is False  # single trials are ASHA's to stop
    assert stopper.spent == 90 and not stopper.stop_all()
    stopper("b", {"eval_loss": 1.0})  # a result without a step (none should come) changes nothing
    stopper("b", {"step": 40})
    assert stopper.spent == 100 and stopper.stop_all()


def test_a_resumed_sweep_keeps_the_steps_already_spent(tmp_path):
    """Tune pickles the stopper once, when the Tuner is made, and a resume unpickles that copy: the ledger in the
    experiment folder carries the spend across."""
    from finesweep.search.tuning.callbacks import StepBudgetStopper

    stopper = StepBudgetStopper(100, tmp_path / "experiment" / "step_budget.json")
    as_created = pickle.dumps(stopper)
    stopper("a", {"step": 50})
    stopper("b", {"step": 30})
    resumed = pickle.loads(as_created)
    assert resumed.spent == 80 and not resumed.stop_all()
    resumed("b", {"step": 50})
    assert resumed.stop_all()


@pytest.mark.slow  # about 70 s: the stopper is tested above; the time-budget sweep stops and exports the same way
def test_step_budget_stops_the_trials_and_the_export_still_happens(tmp_path):
    tiny.classification_folder(tmp_path)
    # Without ASHA (or a plateau stop) every trial would run max_steps: NUM_TRIALS x max_steps = 180 steps, far above
    # the budget. The plan is off (fit_to_budget): it would start only the trials the budget pays for, and this tests
    # the stop itself.
    sweep = SWEEP.replace(f"num_trials: {NUM_TRIALS}",
                          f"num_trials: {NUM_TRIALS}\n  scheduler: none\n  plateau_patience: null\n  step_budget: {BUDGET}\n"
                          f"  fit_to_budget: false\n  max_concurrent_trials: {CONCURRENT}")
    assert f"eval_every_steps: {EVAL_EVERY}" in sweep and NUM_TRIALS * EVAL_EVERY * EVALS_PER_TRIAL > BUDGET
    (tmp_path / "sweep.yaml").write_text(sweep)
    result = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep_dir = tmp_path / "runs" / "tiny"
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
    client, state = store(sweep_dir)
    trials = client.search_runs([state["experiment_id"]],
                                filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    assert trials and all(r.info.status != "RUNNING" for r in trials)
    last_steps = {r.info.run_id: max((m.step for m in client.get_metric_history(r.info.run_id, "eval_accuracy")), default=0)
                  for r in trials}
    # The budget is reached, and passed by at most one evaluation interval per trial running when it was.
    assert BUDGET <= sum(last_steps.values()) <= BUDGET + CONCURRENT * EVAL_EVERY, last_steps
    stopped = [r for r in trials if r.data.tags["finesweep.end_state"].startswith("stopped_by_step_budget_at_step_")]
    assert stopped, [r.data.tags["finesweep.end_state"] for r in trials]
    for run in stopped:
        # The end state names the trial's last evaluation that Tune received: its last logged one, or the one before
        # when the budget ran out while that last result was on its way to the controller.
        step = int(run.data.tags["finesweep.end_state"].rsplit("_", 1)[1])
        assert step in {last_steps[run.info.run_id], last_steps[run.info.run_id] - EVAL_EVERY}, (step, last_steps)
    assert len(trials) < NUM_TRIALS  # the trials not started when the budget ran out never start
