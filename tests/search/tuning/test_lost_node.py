"""A real two-node Ray cluster on this machine (Ray's own test utility, ray.cluster_utils.Cluster, in its
single-machine mode: every node on 127.0.0.1): a sweep joins it, and the worker node dies mid-trial. Its trial is
retried from its last checkpoint on the node that is left, and the sweep ends with every trial accounted for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from tests import tiny
from tests.sweeps import crash_sweep, evaluation_steps, one_model_sweep, trial_runs, tune_results

# Started in a process of its own: Ray reads its single-machine switch when it is first imported, which another test
# of this process may have done already.
CLUSTER_SCRIPT = """
import os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
worker = cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
print(cluster.address, worker.all_processes["raylet"][0].process.pid, flush=True)
if sys.stdin.readline().strip() == "remove":
    cluster.remove_node(worker, allow_graceful=False)
    print("removed", flush=True)
    sys.stdin.readline()
cluster.shutdown()
"""
STEPS, EVERY = 160, 10
SWEEP = one_model_sweep("lostnode", 11, 2, EVERY, STEPS, quantization="none").replace(
    "  num_trials: 2", "  num_trials: 2\n  max_concurrent_trials: 2")


def _on_node(pid: int, raylet: int) -> bool:
    """Whether process `pid` is a worker of the node whose raylet is `raylet`."""
    try:
        return any(parent.pid == raylet for parent in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # about 2 minutes
def test_a_worker_node_lost_mid_trial_costs_no_trial(tmp_path):
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    address, raylet = cluster.stdout.readline().split()
    tiny.classification_folder(tmp_path, SWEEP, rows=400)
    sweep_dir = tmp_path / "runs" / "lostnode"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    with (tmp_path / "sweep.log").open("w") as out:
        sweep = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml", "--address",
                                  address], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # a trial on the worker node with two evaluations: its first checkpoint is registered
            doomed = [(trial, rows) for trial, rows in tune_results(sweep_dir).items()
                      if len(rows) >= 2 and _on_node(rows[-1]["pid"], int(raylet))]
            if doomed:
                break
            assert sweep.poll() is None and time.monotonic() < deadline, (tmp_path / "sweep.log").read_text()[-3000:]
            time.sleep(0.2)
        (trial, rows), = doomed
        assert rows[-1]["step"] < STEPS, "the trial ended before its node could be lost"
        cluster.stdin.write("remove\n")
        cluster.stdin.flush()
        assert cluster.stdout.readline().strip() == "removed"
        sweep.wait(timeout=400)
    finally:
        if sweep.poll() is None:
            crash_sweep(sweep)
        if cluster.poll() is None:
            cluster.stdin.close()
            cluster.wait(timeout=60)
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0, output[-4000:]
    # Every trial accounted for: both ran their whole length, each evaluation once in its own MLflow run.
    evaluations = evaluation_steps(sweep_dir)
    assert len(evaluations) == 2 and all(steps == list(range(EVERY, STEPS + 1, EVERY)) for steps in evaluations.values())
    assert all(r.data.tags["finesweep.end_state"] == "completed" for r in trial_runs(sweep_dir))
    resumed = [r for r in trial_runs(sweep_dir) if "finesweep.resumed_from_step" in r.data.tags]
    assert len(resumed) == 1 and int(resumed[0].data.tags["finesweep.resumed_from_step"]) >= rows[-2]["step"]
    assert json.loads((sweep_dir / "summary.json").read_text())["best"] is not None
