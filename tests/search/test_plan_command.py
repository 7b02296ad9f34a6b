"""`finesweep plan`: data and probe as `run` does them, then the plan and its predicted end; nothing trains."""

from __future__ import annotations

import re
import subprocess
import sys

from tests import tiny
from tests.sweeps import EVALS_PER_TRIAL, NUM_TRIALS, SWEEP, finesweep


def test_plan_prints_the_trials_a_budget_pays_for_and_trains_nothing(tmp_path):
    # 300,000 steps per trial: far more than half a minute pays for on any machine, so the plan must allot time.
    sweep = (SWEEP.replace(f"num_trials: {NUM_TRIALS}", "num_trials: 50\n  time_budget_minutes: 0.5")
             .replace(f"max_steps: {5 * EVALS_PER_TRIAL}", "max_steps: 300000"))
    tiny.classification_folder(tmp_path, sweep, rows=300)
    result = finesweep("plan", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert "Memory probe" in out and "Plan:" in out and "predicted:" in out
    assert "plan: trials allotted time:" in out and "plan: num_trials 50 ->" in out
    # One trial at a time (a CPU's default): a trial's room is half the trials' budget, in whole seconds.
    assert re.search(r"ends inside its room of 50% of the trials' budget \(with 1 trial at a time, so that 2 trials "
                     r"are compared\): \d+ s;", out), "whole seconds, not 0.362-minute"
    assert "budget: 30 s" not in out and "budget: 0.5 minutes" in out, "the file's budget as written"
    evaluations = int(out.split("Plan: ", 1)[1].split(" evaluation")[0])  # 1 evaluation, 2 evaluations
    assert 1 <= evaluations < 300000 // 5  # fewer than the file's 60,000 evaluation periods
    root = tmp_path / "runs" / "tiny"
    assert not any((root / name).exists() for name in ("tune", "mlflow.db", "sweep-state.json", "export"))


def test_a_time_limit_counts_from_the_process_start_not_from_the_commands_first_line():
    """A user's stopwatch starts with the process: what Python spends before a command's first line (its start, the
    imports) is part of --time-limit's time."""
    code = ("import time; time.sleep(1.5); from finesweep.search.measure import process_started; "
            "print(time.time() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 1.5 <= age < 60


def test_the_range_test_narrows_a_planted_range_and_the_plan_says_so(tmp_path):
    """Six decades planted, 1e-5 to 10: a tiny classifier's loss climbs well before 10, so the test must leave a
    decade at most, under the rate where it climbed; a second plan reads the sweep folder's answer."""
    sweep = (SWEEP.replace("learning_rate: {low: 3.0e-3, high: 3.0e-2, log: true}",
                           "learning_rate: {low: 1.0e-5, high: 10.0, log: true}")
             .replace("search:\n", "search:\n  lr_range_test: on\n")
             .replace("precision: [fp32, bf16]", "precision: [fp32]"))
    tiny.classification_folder(tmp_path, sweep, rows=300)
    result = finesweep("plan", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = " ".join(result.stdout.split())
    ranges = re.findall(r"plan: learning-rate range test, (tiny-[ab]) full \(\d+ s\): 1e-05\.\.10 -> "
                        r"([0-9.e+-]+)\.\.([0-9.e+-]+):", out)
    assert sorted(model for model, _, _ in ranges) == ["tiny-a", "tiny-b"], out[-3000:]  # one test per model
    for _, low, high in ranges:
        assert 1e-5 <= float(low) < float(high) <= 1.0 and float(high) <= 10.01 * float(low), (low, high)
    again = " ".join(finesweep("plan", "sweep.yaml", cwd=tmp_path).stdout.split())
    assert again.count("full (cached)") == 2 and "Learning-rate range test:" not in again
