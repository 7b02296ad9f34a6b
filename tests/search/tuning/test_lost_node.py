"""A real two-node Ray cluster on this machine (Ray's own test utility, ray.cluster_utils.Cluster, in its
single-machine mode: every node on 127.0.0.1, the head with its dashboard): a sweep submitted to it runs as a Ray
job while the command has long returned, and the worker node dies mid-trial. Its trial is retried from its last
checkpoint on the node that is left, and the sweep ends with every trial accounted for and exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import tiny
from tests.sweeps import evaluation_steps, finesweep, free_port, one_model_sweep, trial_runs, tune_results

# Started in a process of its own: Ray reads its single-machine switch when it is first imported, which another test
# of this process may have done already.
CLUSTER_SCRIPT = """
import os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"
from ray.cluster_utils import Cluster
dashboard = int(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": True,
                                                        "dashboard_host": "127.0.0.1", "dashboard_port": dashboard})
worker = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
print(f"http://127.0.0.1:{dashboard}", worker.all_processes["raylet"][0].process.pid, flush=True)
if sys.stdin.readline().strip() == "remove":
    cluster.remove_node(worker, allow_graceful=False)
    print("removed", flush=True)
    sys.stdin.readline()
cluster.shutdown()
"""
STEPS, EVERY = 160, 10
SWEEP = one_model_sweep("lostnode", 11, 2, EVERY, STEPS).replace(
    "  num_trials: 2", "  num_trials: 2\n  max_concurrent_trials: 2")


def _on_node(pid: int, raylet: int) -> bool:
    """Whether process `pid` is a worker of the node whose raylet is `raylet`."""
    try:
        return any(parent.pid == raylet for parent in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return False


def _status(address: str, cwd) -> str:
    result = finesweep("status", "lostnode", "--address", address, cwd=cwd)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow  # about 2 minutes
def test_a_submitted_sweep_survives_its_worker_node_lost_mid_trial_and_exports(tmp_path):
    """Every node's Python is this one (its bin folder first on PATH: the job runs `finesweep run`)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER_SCRIPT, str(free_port())], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        address, raylet = cluster.stdout.readline().split()
        tiny.classification_folder(tmp_path, SWEEP, rows=400)
        sweep_dir = tmp_path / "runs" / "lostnode"
        submitted = finesweep("submit", "sweep.yaml", "--address", address, cwd=tmp_path)
        assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
        deadline = time.monotonic() + 300
        while True:  # a trial on the worker node with two evaluations: its first checkpoint is registered
            doomed = [rows for rows in tune_results(sweep_dir).values()
                      if len(rows) >= 2 and _on_node(rows[-1]["pid"], int(raylet))]
            if doomed:
                break
            state = _status(address, tmp_path).splitlines()[0]
            assert time.monotonic() < deadline and (" pending " in state or " running " in state), state
            time.sleep(0.5)
        rows = doomed[0]
        assert rows[-1]["step"] < STEPS, "the trial ended before its node could be lost"
        cluster.stdin.write("remove\n")
        cluster.stdin.flush()
        assert cluster.stdout.readline().strip() == "removed"
        while " running " in (state := _status(address, tmp_path)).splitlines()[0]:
            assert time.monotonic() < deadline + 300, state[-2000:]
            time.sleep(2)
        logs = finesweep("logs", "lostnode", "--address", address, cwd=tmp_path).stdout
    finally:
        if cluster.poll() is None:
            cluster.stdin.close()
            cluster.wait(timeout=60)
    assert "succeeded" in state.splitlines()[0], logs[-4000:]
    assert "best: trial-" in state and "The search compared 2 configurations" in " ".join(logs.split())
    # Every trial accounted for: both ran their whole length, each evaluation once in its own MLflow run.
    evaluations = evaluation_steps(sweep_dir)
    assert len(evaluations) == 2 and all(steps == list(range(EVERY, STEPS + 1, EVERY)) for steps in evaluations.values())
    assert all(r.data.tags["finesweep.end_state"] == "completed" for r in trial_runs(sweep_dir))
    resumed = [r for r in trial_runs(sweep_dir) if "finesweep.resumed_from_step" in r.data.tags]
    assert len(resumed) == 1 and int(resumed[0].data.tags["finesweep.resumed_from_step"]) >= rows[-2]["step"]
    assert json.loads((sweep_dir / "summary.json").read_text())["best"] is not None
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
