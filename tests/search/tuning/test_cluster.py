"""Ray for real: a sweep joins a separately started Ray head (--address), and a trial whose Ray worker is
SIGKILLed mid-trial is retried by Tune from its last checkpoint, in the same MLflow run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from tests import tiny
from tests.sweeps import crash_sweep, evaluation_steps, free_port, metric_steps, one_model_sweep, run_tags, trial_runs, tune_results

RAY = Path(sys.executable).with_name("ray")
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray's single-machine mode: every address is 127.0.0.1

GRID_SWEEP = """
name: gridded
seed: 3
output_root: runs
data: {path: data.csv, splits: {train: 0.7, validation: 0.15, test: 0.15}}
models: [{name: tiny, path: model}]
space:
  learning_rate: {low: 3.0e-3, high: 3.0e-2, log: true}
  effective_batch_size: [8, 16]
  precision: [fp32]
search:
  algorithm: grid
  grid_points: 2
  scheduler: none
  num_trials: 6
  metric: eval_accuracy
  mode: max
  eval_every_steps: 5
  max_steps: 10
resources: {cpus_per_trial: 1, memory_budget: 4GiB}
export: {quantization: [none]}
"""
GRID = sorted((lr, batch) for lr in (3.0e-3, 3.0e-2) for batch in (8, 16))  # 2 grid points per range x 2 batches


def _family(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (empty once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _stop(head: subprocess.Popen) -> None:
    """Stop this head only (other tests on the machine may run Ray too): SIGTERM to `ray start --block` shuts
    its processes down; whatever outlives that is killed by pid."""
    family = _family(head.pid)
    head.terminate()
    try:
        head.wait(timeout=40)
    except subprocess.TimeoutExpired:
        pass
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    head.wait()


@contextmanager
def started_head(options: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen, int, Path]]:
    """A Ray head started with `ray start --block` and `options`, as an operator would, bound to the loopback
    interface only; yields the process, its GCS port and its temp dir, and stops it after.

    `ray start` rewrites --node-ip-address=127.0.0.1 to the machine's outward address and binds GCS and raylet
    to every interface; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is Ray's single-machine mode, which keeps them on
    127.0.0.1. A short temp dir of its own keeps the head's session folder apart (and unix sockets short)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="fsray-"))
    port = free_port()
    env = {**os.environ, **(env or {}), "RAY_AUTH_MODE": "disabled", **LOOPBACK}
    command = [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
               *options, f"--temp-dir={temp_dir}", "--disable-usage-stats",
               f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"]
    log = temp_dir / "ray-start.log"
    with log.open("w") as out:
        head = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, f"ray start failed: {log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield head, port, temp_dir
    finally:
        _stop(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def ray_head():
    """A head without its dashboard: (process, address, temp dir)."""
    with started_head(["--include-dashboard=false"]) as (head, port, temp_dir):
        yield head, f"127.0.0.1:{port}", temp_dir


def _run_watching(command: list[str], cwd: Path, head_pid: int, timeout: float = 300) -> tuple[subprocess.Popen, str, set[int], set[str]]:
    """Run the CLI; meanwhile note every process of the head's family and the names of the sweep's own children."""
    # A loopback-only head is joined in the same single-machine mode: otherwise the driver, too, rewrites
    # 127.0.0.1 to the outward address, where nothing listens, and waits for that GCS forever.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **LOOPBACK}
    head_pids: set[int] = set()
    sweep_children: set[str] = set()
    with (cwd / "sweep.log").open("w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while process.poll() is None:
                assert time.monotonic() < deadline, "the sweep did not finish in time"
                head_pids |= {p.pid for p in _family(head_pid)}
                for child in _family(process.pid)[1:]:
                    try:
                        sweep_children.add(child.name())
                    except psutil.NoSuchProcess:
                        pass
                time.sleep(0.3)
        finally:
            if process.poll() is None:
                crash_sweep(process)
    return process, (cwd / "sweep.log").read_text(), head_pids, sweep_children


def test_a_grid_sweep_joins_a_separately_started_ray_head_and_runs_each_grid_point_once(tmp_path, ray_head):
    head, address, temp_dir = ray_head
    tiny.classification_folder(tmp_path, GRID_SWEEP)
    command = [sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml", "--address", address]
    sweep, output, head_pids, sweep_children = _run_watching(command, tmp_path, head.pid)
    assert sweep.returncode == 0, output[-4000:]

    # The trials ran in the head's worker processes; the sweep started no Ray of its own.
    sweep_dir = tmp_path / "runs" / "gridded"
    results = tune_results(sweep_dir)
    assert len(results) == len(GRID)
    worker_pids = {r["pid"] for rows in results.values() for r in rows}
    assert worker_pids and worker_pids <= head_pids, (worker_pids, head_pids)
    assert not sweep_children & {"raylet", "gcs_server"}, sweep_children
    assert list(temp_dir.glob(f"session_2*/logs/python-core-driver-*_{sweep.pid}.log")), "the sweep was that head's driver"

    # Grid search: 4 distinct configurations, fewer than the 6 trials asked for: each ran once, and said so.
    assert "fewer than search.num_trials (6): each runs once, 4 trials" in " ".join(output.split())
    ran = sorted((float(p["learning_rate"]), int(p["effective_batch_size"])) for p in (r.data.params for r in trial_runs(sweep_dir)))
    assert ran == GRID


KILL_STEPS, KILL_EVERY = 240, 10

KILL_SWEEP = one_model_sweep("workerkill", 7, 1, KILL_EVERY, KILL_STEPS, quantization="none")


def _kill_trial_worker(sweep: subprocess.Popen, sweep_dir: Path, timeout: float = 300) -> int:
    """SIGKILL the Ray worker running the trial mid-trial, once Tune holds a checkpoint of it; returns its pid.

    The worker is the pid Tune records in the trial's results, checked to be a Ray actor process ("ray::...")
    of the sweep's own local Ray. Tune's controller writes a result (result.json) just before it registers the
    checkpoint reported with it: after the second one, the first checkpoint is certainly registered."""
    deadline = time.monotonic() + timeout
    while len(rows := next(iter(tune_results(sweep_dir).values()), [])) < 2:
        assert sweep.poll() is None and time.monotonic() < deadline, "the trial reported no second evaluation"
        time.sleep(0.05)
    assert rows[-1]["step"] < KILL_STEPS, "the trial ended before its worker could be killed"
    worker = [p for p in _family(sweep.pid) if p.pid == rows[-1]["pid"]]
    assert worker and worker[0].cmdline()[0].startswith("ray::"), (rows[-1]["pid"], _family(sweep.pid))
    worker[0].send_signal(signal.SIGKILL)
    # The sink logs each evaluation to MLflow before reporting it to Tune: the store already holds them.
    assert next(iter(evaluation_steps(sweep_dir).values()), [])[:2] == [KILL_EVERY, 2 * KILL_EVERY]
    return worker[0].pid


@pytest.mark.slow  # about 90 s: test_resume (a killed controller) keeps resuming from checkpoints in the default suite
def test_a_trial_whose_worker_is_killed_resumes_from_its_checkpoint_in_the_same_mlflow_run(tmp_path):
    tiny.classification_folder(tmp_path, KILL_SWEEP, rows=400)
    sweep_dir = tmp_path / "runs" / "workerkill"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with (tmp_path / "sweep.log").open("w") as out:
        sweep = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                                 env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        killed = _kill_trial_worker(sweep, sweep_dir)
        sweep.wait(timeout=300)
    finally:
        if sweep.poll() is None:
            crash_sweep(sweep)
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0, output[-4000:]

    evaluations = evaluation_steps(sweep_dir)
    assert len(evaluations) == 1, "the retried trial continued its MLflow run instead of starting another"
    (run_id, steps), = evaluations.items()
    assert steps == list(range(KILL_EVERY, KILL_STEPS + 1, KILL_EVERY)), "every evaluation once, none repeated"
    rows = next(iter(tune_results(sweep_dir).values()))
    last_checkpoint = max(r["step"] for r in rows if r["pid"] == killed)  # each result carries its checkpoint
    assert last_checkpoint < KILL_STEPS and rows[-1]["step"] == KILL_STEPS and rows[-1]["pid"] != killed
    assert int(run_tags(sweep_dir, run_id)["finesweep.resumed_from_step"]) == last_checkpoint, "resumed from it"
    losses = metric_steps(sweep_dir, run_id, "loss")
    assert len(losses) == len(set(losses)), "training logs redone after the checkpoint are not logged again"
