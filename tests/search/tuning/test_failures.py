"""Failures never stop a sweep: a diverging trial and a model that cannot fit are recorded, and the sweep exports."""

from __future__ import annotations

from tests import tiny
from tests.sweeps import finesweep, store

SWEEP = """
name: rough
seed: 2
output_root: runs
data: {path: data.csv, splits: {train: 0.7, validation: 0.15, test: 0.15}}
models:
  - {name: tiny, path: model}
  # Its new classification head starts with weights around 1e37: the first logits overflow and the loss is NaN.
  - {name: unstable, path: model, config_overrides: {initializer_range: 1.0e+37}}
  - {name: large, path: large}
space:
  learning_rate: {low: 3.0e-3, high: 3.0e-2, log: true}
  effective_batch_size: [8]
  precision: [fp32]
search:
  algorithm: random
  num_trials: 3
  metric: eval_accuracy
  mode: max
  eval_every_steps: 5
  max_steps: 10
  initial_points: [{model: unstable}, {model: tiny}]
resources: {cpus_per_trial: 1, memory_budget: 1GiB}
export: {quantization: [none]}
"""


def test_diverging_and_unfit_candidates_are_recorded_and_the_sweep_exports(tmp_path):
    tiny.build_tiny_classifier(tmp_path / "model")
    tiny.build_large_encoder(tmp_path / "large", tmp_path / "model")
    tiny.write_csv(tmp_path / "data.csv", tiny.sentiment_rows(300))
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    result = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "model large removed from the space" in result.stdout
    sweep_dir = tmp_path / "runs" / "rough"
    client, state = store(sweep_dir)
    trials = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    assert len(trials) == 3, "a diverged trial is recorded once, not retried"
    by_model = {}
    for run in trials:
        by_model.setdefault(run.data.params["model"], []).append(run)
    assert "large" not in by_model
    unstable = by_model["unstable"]
    assert all(r.data.tags["finesweep.end_state"] == "diverged" and r.info.status == "FAILED" for r in unstable)
    assert all("training loss became" in r.data.tags["finesweep.error"] for r in unstable)
    assert any(r.data.tags["finesweep.end_state"] == "completed" for r in by_model["tiny"])
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
