"""A team's tracking server: mlflow/start-server.sh on loopback, and a sweep logging to it over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiny
from tests.sweeps import SWEEP, finesweep, free_port, get_json

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow  # test_tracking_offline starts the same server and logs a sweep to it by default
def test_a_sweep_logs_to_a_real_mlflow_server(tmp_path):
    port = free_port()
    env = {**os.environ, "MLFLOW_PORT": str(port), "MLFLOW_DATA_DIR": str(tmp_path / "server"), "MLFLOW_WORKERS": "1",
           "PYTHON": sys.executable}
    server = subprocess.Popen(["bash", str(REPO / "mlflow" / "start-server.sh")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        get_json(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", 90)
        tiny.classification_folder(tmp_path, SWEEP.replace("num_trials: 6", "num_trials: 2"))
        result = finesweep("run", "sweep.yaml", "--tracking-uri", url, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert not (tmp_path / "runs" / "tiny" / "mlflow.db").exists(), "nothing may go to the local store"
        experiment = get_json(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny", 10)["experiment"]
        runs = _post_json(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
        parents = [r for r in runs if not _tag(r, "mlflow.parentRunId")]
        children = [r for r in runs if _tag(r, "mlflow.parentRunId") == parents[0]["info"]["run_id"]]
        assert len(parents) == 1 and len(children) == 2
        assert all(any(m["key"] == "eval_accuracy" for m in r["data"].get("metrics", [])) for r in children)
        state = json.loads((tmp_path / "runs" / "tiny" / "sweep-state.json").read_text())
        assert state["tracking_uri"] == url
        from mlflow import MlflowClient

        registry = MlflowClient(url)  # the team's registry has the export: each variant, by its alias
        for variant in ("full", "int8"):
            version = registry.get_model_version_by_alias("tiny", variant)
            assert version.tags["finesweep.variant"] == variant, result.stdout[-3000:]
        status = finesweep("status", "sweep.yaml", cwd=tmp_path)
        assert status.returncode == 0 and status.stdout.count("trial-") == 2, status.stdout + status.stderr
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def _tag(run: dict, key: str) -> str | None:
    return next((t["value"] for t in run["data"].get("tags", []) if t["key"] == key), None)


def _post_json(url: str, body: dict) -> dict:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())
