"""DeepSpeed ZeRO as an optional trial setting (resources.deepspeed_stage).

On this CPU machine: the config the Trainer gets, the single-process rendezvous, and the clear error when CUDA or
deepspeed is missing. The real run needs a GPU and deepspeed: marked `gpu` (run with `-m gpu` on such a machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import tiny
from tests.sweeps import SWEEP, finesweep


def _plan(stage: int, precision: str, devices: int):
    from finesweep.spaces import ModelCandidate
    from finesweep.trainer.trial import TrialPlan, plan_batches

    return TrialPlan(candidate=ModelCandidate(name="m", path="model").model_dump(), task="classification",
                     label_names=["a", "b"], tokenized_dir="tokenized", output_dir="out", precision=precision,
                     method="full", learning_rate=1e-3, weight_decay=0.0, warmup_ratio=0.0,
                     batch=plan_batches(24, max_micro=4, devices=devices), eval_batch=8, max_steps=10,
                     eval_every_steps=5, seed=0, threads=1, deepspeed_stage=stage)


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("devices", [1, 2])
def test_the_zero_config_carries_the_trials_stage_batch_and_precision(stage, precision, devices):
    """The config the trial hands the Trainer: the plan's stage, its micro-batch and accumulation and its effective
    batch (DeepSpeed's train_batch_size = world x micro x accumulation), and exactly its own precision enabled."""
    from finesweep.trainer.trial import deepspeed_config

    plan = _plan(stage, precision, devices)
    micro, accumulation = {1: (4, 6), 2: (4, 3)}[devices]  # 24 = 4 x 6 on one device, 2 x 4 x 3 on two
    assert (plan.batch.micro, plan.batch.accumulation) == (micro, accumulation)
    config = deepspeed_config(plan)
    assert config["zero_optimization"]["stage"] == stage
    assert config["train_micro_batch_size_per_gpu"] == micro
    assert config["gradient_accumulation_steps"] == accumulation
    assert config["train_batch_size"] == devices * micro * accumulation == 24
    assert config["bf16"]["enabled"] is (precision == "bf16") and config["fp16"]["enabled"] is (precision == "fp16")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_zero_config_matches_the_trials_training_arguments(precision):
    """The Trainer refuses a DeepSpeed number that differs from its TrainingArguments: the two built from one plan
    agree (TrainingArguments with deepspeed set needs the package, so its other fields are read without it)."""
    from dataclasses import replace

    from finesweep.trainer.trial import _training_arguments, deepspeed_config

    plan = _plan(2, precision, 1)
    config, args = deepspeed_config(plan), _training_arguments(replace(plan, deepspeed_stage=0))
    assert config["train_micro_batch_size_per_gpu"] == args.per_device_train_batch_size
    assert config["gradient_accumulation_steps"] == args.gradient_accumulation_steps
    assert config["train_batch_size"] == args.world_size * args.per_device_train_batch_size * args.gradient_accumulation_steps
    assert (config["bf16"]["enabled"], config["fp16"]["enabled"]) == (args.bf16, args.fp16)


def test_a_single_process_trial_gets_a_world_of_one_and_a_launchers_world_is_kept():
    script = ("import json, os\nfrom finesweep.trainer.trial import single_process_rendezvous\nsingle_process_rendezvous()\n"
              "print(json.dumps({k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}))")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    alone = json.loads(subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True, text=True,
                                      check=True).stdout)
    assert alone["RANK"] == "0" and alone["WORLD_SIZE"] == "1" and alone["MASTER_ADDR"] == "127.0.0.1"
    assert 0 < int(alone["MASTER_PORT"]) < 65536
    launched = {**clean, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    kept = json.loads(subprocess.run([sys.executable, "-c", script], env=launched, capture_output=True, text=True,
                                     check=True).stdout)
    assert kept == {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}


def test_zero_on_the_cpu_stops_before_anything_runs(tmp_path):
    """gpus_per_trial: 0 trains on the CPU even where CUDA is present, so ZeRO is refused on any machine."""
    tiny.touch_sweep_inputs(tmp_path)  # the paths exist: the check under test is what stops the sweep
    (tmp_path / "sweep.yaml").write_text(SWEEP.replace("resources: {cpus_per_trial: 1,",
                                                       "resources: {deepspeed_stage: 2, gpus_per_trial: 0, cpus_per_trial: 1,"))
    done = finesweep("run", "sweep.yaml", cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "resources.deepspeed_stage: ZeRO stage 2 needs" in done.stderr and "deepspeed_stage: 0" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.gpu
def test_a_zero_2_sweep_trains_and_exports_on_a_gpu(tmp_path):
    """On a CUDA machine with deepspeed: trials train through the Trainer's DeepSpeed integration and export."""
    from mlflow import MlflowClient

    # deepspeed is no dependency of finesweep (its wheel builds CUDA kernels); a GPU machine without it cannot run
    # this, and the sweep's refusal there is tested above.
    pytest.importorskip("deepspeed", reason="deepspeed is not installed")

    tiny.classification_folder(tmp_path)
    sweep = SWEEP.replace("num_trials: 6", "num_trials: 2").replace(
        "resources: {cpus_per_trial: 1,", "resources: {deepspeed_stage: 2, gpus_per_trial: 1, cpus_per_trial: 1,")
    (tmp_path / "sweep.yaml").write_text(sweep)
    done = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = json.loads((tmp_path / "runs" / "tiny" / "sweep-state.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    trials = client.search_runs([state["experiment_id"]], f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    assert len(trials) == 2 and [r.data.params.get("deepspeed_stage") for r in trials] == ["2", "2"]
    assert (tmp_path / "runs" / "tiny" / "export" / "model" / "model.safetensors").is_file()
