"""search.baseline.budget: equal (search/tuning/equal_time.py): after the search, the baseline recipe trains again for
as long as the export trained, is scored on the test split by the export's own code, and a crash in the middle of
it loses nothing it trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from finesweep.search.budget.plan import unplanned
from finesweep.search.selection.best import Best
from finesweep.search.tuning import equal_time, exploit
from finesweep.search.tuning.context import EQUAL_TIME_KEY, build_plan
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import BASELINE_KEY
from tests import tiny
from tests.sweeps import (crash_when, finesweep, one_model_sweep, run_tags, saved_checkpoints_of_running_trials,
                          store, trial_runs)

EVERY = 5
BUDGET_MINUTES = 0.8
# Two trials (the baseline, 3 epochs, and one of the space's, cut by the trials' share: the tiny model's steps are too
# short for a plan in seconds), then the winner and the equal-time run each evaluating every EVERY steps: the crash
# comes after the equal-time run's third evaluation, with time left to resume.
SWEEP = one_model_sweep("equal", 5, 2, EVERY, 2000, quantization="none").replace(
    '  baseline: "off"', f'  baseline: {{budget: equal}}\n  time_budget_minutes: {BUDGET_MINUTES}\n'
    '  fit_to_budget: false\n  exploit: {share: 0.5, evaluations: 100000, max_epochs: null}')


def _baseline(params: dict | None = None) -> Best:
    return Best("base", 35, "eval_accuracy", 0.6, {"model": "tiny", "precision": "fp32", "method": "full",
                                                   "effective_batch_size": 8, "learning_rate": 5e-5,
                                                   "warmup_ratio": 0.0, "weight_decay": 0.0, BASELINE_KEY: True,
                                                   **(params or {})}, Path("/ckpt/base/35"), None, baseline=True)


def test_the_equal_time_run_is_the_baseline_recipe_from_step_0_with_every_weight_and_the_checkpoints_dropout():
    """What a user's Trainer run is: not capped at the baseline trial's length, nothing frozen, random batches, no
    dropout of the space's, no checkpoint to start from; told to end by its deadline, its steps estimated from the baseline's speed."""
    params = equal_time.recipe(_baseline())
    assert BASELINE_KEY not in params and params[EQUAL_TIME_KEY] is True and "dropout" not in params
    config = SweepConfig.model_validate({
        "name": "x", "data": {"path": "data.csv"}, "models": [{"name": "tiny", "path": "m"}],
        "space": {"dropout": 0.0, "freeze_embeddings": True}, "search": {"time_budget_minutes": 5,
                                                                          "baseline": {"budget": "equal"}}})

    class Result:
        metrics = {"trial_id": "base", "train_samples_per_second_so_far": 16.0}

    told = exploit.order(config, _baseline(), [Result()], 100.0, unplanned(config, 1), 1000.0, cores_ratio=2.0,
                         from_checkpoint=False)
    assert told.source_checkpoint is None and told.provisional_steps == 200 and told.finish_by == 1100.0
    from finesweep.search.tuning.context import TrialContext, planned_lengths

    context = TrialContext(sweep=config.model_dump(mode="json"), tokenized={"tiny": "t"}, label_names=None,
                           micro_batches={"tiny|fp32|full": 8}, eval_batches={}, tracking_uri="", experiment_id="",
                           parent_run_id="", train_rows=280, exploitation=told, **planned_lengths(unplanned(config, 1)))
    plan = exploit.trial_plan(build_plan(params, context, "out"), told, None, lambda source: source)
    assert (plan.max_steps, plan.resume_from, plan.freeze_embeddings, plan.dropout, plan.baseline) == (
        200, None, False, None, False)
    assert not plan.group_by_length, "random batches, as TrainingArguments samples by default"
    sampled = build_plan({key: value for key, value in params.items() if key != EQUAL_TIME_KEY}, context, "out")
    assert sampled.group_by_length and sampled.freeze_embeddings, "a sampled trial: finesweep's own recipe"
    assert plan.finish_by == 1100.0 and not plan.restart_schedule


def test_a_workers_per_trial_sweep_refuses_the_equal_time_baseline_with_the_fix():
    with pytest.raises(ValueError, match=r"search.baseline.budget: equal trains the baseline again in one process, "
                                         r"but resources.workers_per_trial is 2; set budget: trial"):
        SweepConfig.model_validate({"name": "x", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "m"}],
                                    "resources": {"workers_per_trial": 2}, "search": {"baseline": {"budget": "equal"}}})


def _equal_time_run(sweep_dir: Path):
    return next((r for r in trial_runs(sweep_dir) if r.info.run_name == equal_time.TRIAL_NAME), None)


def _equal_time_evaluations(sweep_dir: Path) -> list[int] | None:
    """The equal-time run's evaluation steps once it has three and Tune's saved state names a checkpoint of it."""
    run = _equal_time_run(sweep_dir) if (sweep_dir / "sweep-state.json").is_file() else None
    if run is None:
        return None
    client, _ = store(sweep_dir)
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval_accuracy"))
    saved = saved_checkpoints_of_running_trials(sweep_dir)
    if len(steps) >= 3 and any(folder.name == equal_time.TRIAL_NAME for folder in saved):
        return steps
    return None


def test_the_baseline_trains_again_for_the_exports_seconds_is_scored_like_it_and_a_crash_keeps_what_it_trained(
        tmp_path):
    tiny.classification_folder(tmp_path, SWEEP, rows=400)
    sweep_dir = tmp_path / "runs" / "equal"
    process = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    before = crash_when(process, lambda: _equal_time_evaluations(sweep_dir), "the equal-time run's third evaluation")
    process.communicate()
    state = json.loads((sweep_dir / "sweep-state.json").read_text())
    asked = state["equal_time"]["seconds"]
    run = _equal_time_run(sweep_dir)

    result = finesweep("resume", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [r.info.run_id for r in trial_runs(sweep_dir) if r.info.run_name == equal_time.TRIAL_NAME] == \
        [run.info.run_id], "the same run goes on"
    resumed_from = int(run_tags(sweep_dir, run.info.run_id)["finesweep.resumed_from_step"])
    assert resumed_from >= before[0] > 0, "it went on from a checkpoint of its own, not from step 0"

    summary = json.loads((sweep_dir / "summary.json").read_text())
    baseline, comparison = summary["baseline"], summary["comparison"]
    done = comparison["equal_time"]
    # As long as the export trained: the seconds it was asked for are the export arm's, and it trained them.
    assert asked == done["seconds"] == comparison["arms"]["export"]["seconds"] > 0
    assert abs(done["trained_seconds"] - asked) <= 0.1 * asked, done
    assert baseline["footing"] == "equal_time" and baseline["gain"] == baseline["difference"]
    low, high = baseline["gain_interval"]
    assert low <= baseline["gain"] <= high
    assert comparison["arms"]["baseline"]["seconds"] == done["trained_seconds"]
    checkpoint = done["checkpoint"]
    accuracy = {m.step: m.value for m in store(sweep_dir)[0].get_metric_history(run.info.run_id, "eval_accuracy")}
    assert max(accuracy) > before[-1], "it trained on after the crash"
    assert checkpoint["trial_id"] != baseline["trial_id"]
    assert accuracy[checkpoint["step"]] == max(accuracy.values()), "its best evaluation, before the crash or after"
    assert "The gain at equal time: the baseline recipe trained again from step 0" in baseline["sentence"]
    # Scored by the export's own code: the same figure as the export's evaluation of that checkpoint gives.
    assert baseline["test"]["accuracy"] == pytest.approx(_test_accuracy(sweep_dir, checkpoint), abs=1e-9)
    parent = store(sweep_dir)[0].get_run(json.loads((sweep_dir / "sweep-state.json").read_text())["parent_run_id"])
    assert parent.data.metrics["equal_time_gain_accuracy"] == baseline["gain"]
    assert parent.data.tags["finesweep.baseline_footing"] == "equal_time"
    leaderboard = finesweep("status", "sweep.yaml", cwd=tmp_path).stdout
    assert f"{equal_time.TRIAL_NAME} *" in leaderboard, "marked as the baseline recipe in the leaderboard"


def _test_accuracy(sweep_dir: Path, checkpoint: dict) -> float:
    """The test accuracy of a checkpoint, as the export scores a model: its folder loaded, the cached test split."""
    from finesweep.trainer import data as data_module
    from finesweep.trainer.models import load_checkpoint, load_tokenizer
    from finesweep.trainer.serving.evaluate import evaluate
    from finesweep.spaces import Task

    state = json.loads((sweep_dir / "sweep-state.json").read_text())
    config = SweepConfig.model_validate(state["config"])
    tokenized = next((sweep_dir / "cache").rglob("dataset_dict.json")).parent
    split = data_module.load_tokenized(tokenized)["test"]
    tokenizer = load_tokenizer(config.candidate("tiny"), False)
    model = load_checkpoint(checkpoint["checkpoint_dir"], Task.classification)
    return evaluate(model, split, data_module.collator(tokenizer, Task.classification), Task.classification)["accuracy"]
