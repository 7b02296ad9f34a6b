"""Data-parallel trials: the ranks agree on the micro-batch; a sweep with workers_per_trial: 2 trains each trial on
two Ray Train workers (real gloo) and logs, ranks and exports as a single-process sweep does."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests import tiny
from tests.sweeps import finesweep
from tests.sweeps import one_model_sweep


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _agree(rank: int, world: int, port: int, local: tuple[int, int], out: str) -> None:
    """One rank of a real gloo process group: its own (micro, eval) batches in, the agreed ones written out."""
    import torch.distributed as dist

    from finesweep.search.tuning.distributed import agreed_minimum

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        Path(out, f"rank{rank}.json").write_text(json.dumps(agreed_minimum(local)))
    finally:
        dist.destroy_process_group()


def test_ranks_agree_on_the_minimum_of_their_own_micro_batches(tmp_path):
    import torch.multiprocessing as mp

    own = {0: (16, 64), 1: (6, 96)}  # as two different devices' probes could answer
    processes = []
    port = _free_port()
    for rank, local in own.items():
        process = mp.get_context("spawn").Process(target=_agree, args=(rank, 2, port, local, str(tmp_path)))
        process.start()
        processes.append(process)
    for process in processes:
        process.join(timeout=120)
        if process.is_alive():  # a rank left waiting in the collective
            process.kill()
        assert process.exitcode == 0
    agreed = [tuple(json.loads((tmp_path / f"rank{rank}.json").read_text())) for rank in own]
    assert agreed == [(6, 64), (6, 64)]


def test_a_rank_gets_a_whole_gpu_or_none():
    from pydantic import ValidationError

    from finesweep.spaces.config import ResourcesConfig

    assert ResourcesConfig(workers_per_trial=4, gpus_per_trial=1).workers_per_trial == 4
    assert ResourcesConfig(gpus_per_trial=0.5).gpus_per_trial == 0.5  # one process per trial may share a GPU
    with pytest.raises(ValidationError, match="gpus_per_trial must be 0 or 1 when workers_per_trial > 1"):
        ResourcesConfig(workers_per_trial=2, gpus_per_trial=0.5)


EVERY, MAX_STEPS = 5, 10

SWEEP = f"""
name: parallel
seed: 4
output_root: runs
data: {{path: data.csv, splits: {{train: 0.7, validation: 0.15, test: 0.15}}}}
models:
  - {{name: tiny, path: model}}
  # Its new classification head starts with weights around 1e37: the first loss is NaN
  # (tests/search/tuning/test_failures.py).
  - {{name: unstable, path: model, config_overrides: {{initializer_range: 1.0e+37}}}}
space:
  learning_rate: {{low: 3.0e-3, high: 3.0e-2, log: true}}
  effective_batch_size: [8, 9]
  precision: [fp32]
search:
  algorithm: random
  num_trials: 3
  # 9 does not split over 2 workers; the tiny trial trains; the unstable one then needs the workers the tiny one had.
  initial_points: [{{effective_batch_size: 9}}, {{model: tiny, effective_batch_size: 8}},
                   {{model: unstable, effective_batch_size: 8}}]
  metric: eval_accuracy
  mode: max
  eval_every_steps: {EVERY}
  max_steps: {MAX_STEPS}
resources: {{cpus_per_trial: 1, workers_per_trial: 2, memory_budget: 4GiB}}
export: {{quantization: [int8]}}
"""


@pytest.mark.slow  # about two minutes on 2 cores: two Ray Train workers per trial, gloo all-reduce on CPU
def test_a_sweep_of_two_worker_trials_logs_ranks_and_exports_like_a_single_process_one(tmp_path):
    """2 workers x 1 CPU fill this 2-core machine: the trials' drivers reserve no CPU. Each trial's run has the
    world size and an exact batch split, every evaluation once; failures are recorded; the best checkpoint (kept by
    Ray Train) is exported."""
    from tests.sweeps import store

    tiny.classification_folder(tmp_path, SWEEP)
    result = finesweep("run", "sweep.yaml", cwd=tmp_path, timeout=420)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    sweep_dir = tmp_path / "runs" / "parallel"
    client, state = store(sweep_dir)
    runs = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    ends = {r.data.tags["finesweep.end_state"]: r for r in runs}
    assert set(ends) == {"batch_not_divisible", "completed", "diverged"}, [r.data.tags for r in runs]
    assert "effective batch 9 cannot be split evenly over 2 devices" in ends["batch_not_divisible"].data.tags["finesweep.error"]
    assert "training loss became" in ends["diverged"].data.tags["finesweep.error"]
    trained = ends["completed"]
    params = trained.data.params
    assert params["devices"] == "2" and params["model"] == "tiny"
    assert int(params["micro_batch"]) * int(params["gradient_accumulation"]) * 2 == int(params["effective_batch_size"]) == 8
    steps = [m.step for m in client.get_metric_history(trained.info.run_id, "eval_accuracy")]
    assert steps == list(range(EVERY, MAX_STEPS + 1, EVERY)), "every evaluation logged once, by rank 0 alone"

    summary = json.loads((sweep_dir / "summary.json").read_text())
    best = summary["best"]
    assert best["mlflow_run_id"] == trained.info.run_id
    values = {m.step: m.value for m in client.get_metric_history(trained.info.run_id, "eval_accuracy")}
    assert best["value"] == pytest.approx(max(values.values())) and values[best["step"]] == pytest.approx(best["value"])
    checkpoint = Path(best["checkpoint_dir"])  # Ray Train's copy, both ranks' parts merged
    assert checkpoint.parent.name.startswith("train-") and (checkpoint / "model.safetensors").is_file()
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == best["step"]
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
    assert set(json.loads((sweep_dir / "export" / "metrics.json").read_text())) == {"full", "int8"}


KILL_EVERY, KILL_STEPS = 10, 200

KILL_SWEEP = one_model_sweep("rankkill", 7, 1, KILL_EVERY, KILL_STEPS, quantization="none",
                             resources="workers_per_trial: 2, ")


@pytest.mark.slow  # about two minutes: a whole trial, a lost worker, and the trial again from its checkpoint
def test_a_trial_whose_rank_is_killed_resumes_from_ray_trains_checkpoint_in_the_same_mlflow_run(tmp_path):
    """A Ray Train worker SIGKILLed mid-trial fails the run; Tune retries the trial, Ray Train restores its latest
    checkpoint: the steps go on from there, in the same MLflow run, every evaluation logged once, and Tune's
    evaluation count (ASHA's clock) goes on too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tests.sweeps import metric_steps, tune_results
    from tests.sweeps import crash_sweep, evaluation_steps, run_tags

    tiny.classification_folder(tmp_path, KILL_SWEEP, rows=400)
    sweep_dir = tmp_path / "runs" / "rankkill"
    with (tmp_path / "sweep.log").open("w") as out:
        sweep = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                                 env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        # Tune gets a result once Ray Train has registered its checkpoint (TuneReportCallback runs after that); MLflow
        # has it earlier (rank 0 logs, then reports). After Tune's second result the first checkpoint is certainly kept.
        deadline = time.monotonic() + 300
        while len(rows := next(iter(tune_results(sweep_dir).values()), [])) < 2:
            assert sweep.poll() is None and time.monotonic() < deadline, "the trial reported no second evaluation"
            time.sleep(0.05)
        assert rows[-1]["step"] < KILL_STEPS, "the trial ended before its worker could be killed"
        ranks = [p for p in psutil.Process(sweep.pid).children(recursive=True)
                 if p.cmdline() and p.cmdline()[0].startswith("ray::RayTrainWorker")]
        assert len(ranks) == 2, [p.cmdline()[:1] for p in psutil.Process(sweep.pid).children(recursive=True)]
        ranks[0].send_signal(signal.SIGKILL)
        sweep.wait(timeout=400)
    finally:
        if sweep.poll() is None:
            crash_sweep(sweep)
    assert sweep.returncode == 0, (tmp_path / "sweep.log").read_text()[-4000:]

    evaluations = evaluation_steps(sweep_dir)
    assert len(evaluations) == 1, "the retried trial continued its MLflow run instead of starting another"
    (run_id, steps), = evaluations.items()
    assert steps == list(range(KILL_EVERY, KILL_STEPS + 1, KILL_EVERY)), "every evaluation once, none repeated"
    resumed = int(run_tags(sweep_dir, run_id)["finesweep.resumed_from_step"])
    assert KILL_EVERY <= resumed < KILL_STEPS, "the retried trial went on from a checkpoint"
    losses = metric_steps(sweep_dir, run_id, "loss")
    assert len(losses) == len(set(losses)), "training logs redone after the checkpoint are not logged again"
    rows = next(iter(tune_results(sweep_dir).values()))
    assert len({r["pid"] for r in rows}) == 2, "a second driver ran the trial"
    assert all(r["training_iteration"] == r["step"] // KILL_EVERY for r in rows)
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
