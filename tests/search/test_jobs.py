"""Sweeps submitted as Ray jobs (search/jobs.py): to a real head started with `ray start` and its dashboard, followed
with status and logs by the sweep's name, stopped with stop."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from finesweep.search import jobs
from finesweep.spaces import SweepFileError
from tests import tiny
from tests.search.tuning.test_cluster import GRID_SWEEP, started_head
from tests.sweeps import finesweep, free_port, one_model_sweep


def test_a_submit_to_an_address_where_no_dashboard_answers_is_one_paragraph(tmp_path):
    tiny.classification_folder(tmp_path, GRID_SWEEP)
    address = f"http://127.0.0.1:{free_port()}"
    result = finesweep("submit", "sweep.yaml", "--address", address, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"--address {address}: no Ray dashboard answers there" in " ".join(result.stderr.split())


@pytest.fixture
def dashboard_head():
    """A Ray head with its dashboard (the Jobs API), on 127.0.0.1 only, whose jobs run this environment's Python
    (its bin folder first on PATH, as a cluster's installed environment would be): the dashboard's address."""
    dashboard = free_port()
    env = {"HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    options = ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"]
    with started_head(options, env):
        yield f"http://127.0.0.1:{dashboard}"


def _wait_for(sweep: str, address: str, cwd: Path, words: str, timeout: float = 300) -> str:
    """`finesweep status SWEEP --address` until its first line holds `words`; its whole output."""
    deadline = time.monotonic() + timeout
    while True:
        result = finesweep("status", sweep, "--address", address, cwd=cwd)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        if words in result.stdout.splitlines()[0]:
            return result.stdout
        assert time.monotonic() < deadline, result.stdout[-2000:]
        time.sleep(2)


@pytest.mark.slow  # about 80 s: a head with its dashboard, then a whole sweep as its job
def test_a_submitted_sweep_runs_on_the_cluster_after_the_command_returned_and_is_followed_by_name(tmp_path,
                                                                                                  dashboard_head):
    tiny.classification_folder(tmp_path, GRID_SWEEP)
    submitted = finesweep("submit", "sweep.yaml", "--address", dashboard_head, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
    assert submitted.stdout.startswith("submitted sweep gridded as Ray job finesweep-gridded-")
    assert f"finesweep logs gridded --address {dashboard_head} --follow" in submitted.stdout
    again = finesweep("submit", "sweep.yaml", "--address", dashboard_head, cwd=tmp_path)
    assert again.returncode == 2 and "sweep gridded is already running" in " ".join(again.stderr.split())
    done = _wait_for("gridded", dashboard_head, tmp_path, "succeeded")
    assert "best: trial-" in done, "the leaderboard of the folder this machine shares with the head"
    logs = finesweep("logs", "gridded", "--address", dashboard_head, cwd=tmp_path)
    assert logs.returncode == 0 and "The search compared 4 configurations" in " ".join(logs.stdout.split())
    followed = finesweep("logs", "gridded", "--address", dashboard_head, "--follow", cwd=tmp_path)
    assert followed.returncode == 0 and "The search compared 4 configurations" in " ".join(followed.stdout.split())
    assert (tmp_path / "runs" / "gridded" / "export" / "model" / "model.safetensors").is_file()
    stopped = finesweep("stop", "gridded", "--address", dashboard_head, cwd=tmp_path)
    assert stopped.returncode == 0 and "already succeeded" in stopped.stdout
    unknown = finesweep("logs", "nosuch", "--address", dashboard_head, cwd=tmp_path)
    assert unknown.returncode == 2 and "its sweeps: gridded" in " ".join(unknown.stderr.split())
    # Storage the head does not see at the same path (here: none at all) is said before anything is submitted.
    with pytest.raises(SweepFileError, match="the cluster's head does not read this sweep file"):
        jobs.check_storage(jobs.client(dashboard_head), tmp_path / "elsewhere" / "sweep.yaml", tmp_path)


@pytest.mark.slow  # about 60 s
def test_a_stopped_sweep_ends_as_run_does_on_sigterm_and_resumes(tmp_path, dashboard_head):
    tiny.classification_folder(tmp_path, one_model_sweep("long", 3, 2, 10, 100_000, quantization="none"))
    assert finesweep("submit", "sweep.yaml", "--address", dashboard_head, cwd=tmp_path).returncode == 0
    _wait_for("long", dashboard_head, tmp_path, "running")
    deadline = time.monotonic() + 240
    while not list((tmp_path / "runs" / "long" / "tune").glob("*/trial-*/checkpoint_*")):
        assert time.monotonic() < deadline, "no trial saved a checkpoint"
        time.sleep(1)
    stopped = finesweep("stop", "long", "--address", dashboard_head, cwd=tmp_path)
    assert stopped.returncode == 0 and "stopping" in stopped.stdout
    _wait_for("long", dashboard_head, tmp_path, "stopped", timeout=120)
    assert (tmp_path / "runs" / "long" / "sweep-state.json").is_file(), "the folder resume goes on from"
