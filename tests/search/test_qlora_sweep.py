"""A QLoRA sweep end to end through the CLI: the probe measures qlora like any method, trials train adapters on the
4-bit base, and the export merges the winning adapter into the full-precision base (the adapter also alone)."""

from __future__ import annotations

import json

import pytest

from tests import tiny
from tests.sweeps import finesweep

SWEEP = """
name: qlora
seed: 2
output_root: runs
data: {path: data.csv, splits: {train: 0.7, validation: 0.15, test: 0.15}}
models: [{name: tiny, path: model}]
space: {learning_rate: 1.0e-2, effective_batch_size: [8], precision: [fp32], method: [qlora], lora_r: [4], lora_alpha: [8]}
search: {algorithm: random, scheduler: none, num_trials: 1, metric: eval_accuracy, mode: max, eval_every_steps: 5, max_steps: 10,
         baseline: "off"}
resources: {cpus_per_trial: 1, memory_budget: 4GiB, gradient_checkpointing: "on"}
export: {quantization: [none], register_model: false}
"""


# Three quarters of a minute: the default suite keeps QLoRA's parts (tests/trainer/test_methods.py: a qlora trial
# with checkpointing trains and saves its adapter; tests/search/outputs/test_export.py: adapters merged on their base).
@pytest.mark.slow
def test_a_qlora_sweep_trains_adapters_and_exports_them_merged_into_the_full_base(tmp_path):
    folder = tiny.classification_folder(tmp_path, SWEEP, rows=300, hidden_size=tiny.QLORA_HIDDEN)
    done = finesweep("run", "sweep.yaml", cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tiny fp32 qlora r=4 lr=1.00e-02 batch=8: step 5" in done.stdout  # each evaluation says what trains
    sweep_dir = folder / "runs" / "qlora"
    probe = json.loads((sweep_dir / "cache" / "probe.json").read_text())
    assert [r["method"] for r in probe.values()] == ["qlora"] and all(r["gradient_checkpointing"] for r in probe.values())
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["best"]["params"]["method"] == "qlora"
    export = sweep_dir / "export"
    assert (export / "adapter" / "adapter_model.safetensors").is_file()
    merged = json.loads((export / "model" / "config.json").read_text())
    assert "quantization_config" not in merged, "the merged model is the full-precision base with the adapter in it"
    assert summary["test_metrics"]["full"]["accuracy"] > 0
