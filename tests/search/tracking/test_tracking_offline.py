"""Nothing is lost when the tracking server is down: writes are retried, then spooled on disk, and
`finesweep sync` replays them once, in order, when the server is back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from finesweep.search.tracking.spool import Spool, is_placeholder
from finesweep.search.tracking.sync import replay
from finesweep.search.tracking.client import RetryPolicy, Tracker, TrackingUnavailable
from finesweep.search.tracking.tags import END_STATE_TAG, PARENT_TAG, TRIAL_TAG
from tests import tiny
from tests.sweeps import SWEEP, finesweep, free_port, get_json

REPO = Path(__file__).resolve().parents[3]
RETRY_BUDGET = "1"  # seconds per call before a write is spooled (the default, 30, is for real outages)


def test_a_call_retries_with_doubling_waits_then_gives_up_within_its_budget(tmp_path, monkeypatch):
    """The call itself, not the formula: every attempt made, the waits it slept double, and the whole call stays
    inside the budget before it raises."""
    from finesweep.search.tracking import client as client_module

    slept, calls = [], []
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    policy = RetryPolicy(attempts=4, budget_s=8.0)
    tracker = Tracker(f"http://127.0.0.1:{free_port()}", policy=policy)

    def down():
        calls.append(1)
        raise ConnectionError("refused")

    with pytest.raises(TrackingUnavailable):
        tracker.call(down)
    assert len(calls) == policy.attempts, "every attempt is made"
    assert slept == [1.0, 2.0, 4.0] and sum(slept) <= policy.budget_s
    calls.clear()
    with pytest.raises(TrackingUnavailable, match="retrying later"):
        tracker.call(down)  # in its cool-down the server is not asked again
    assert not calls


def test_a_brief_server_error_while_reading_the_leaderboard_is_retried(tmp_path, monkeypatch):
    """The leaderboard is read just before the export: one failed read must not fail a finished sweep."""
    from mlflow.exceptions import MlflowException

    from finesweep.search.outputs.console import leaderboard_table
    from finesweep.search.tracking import client as client_module

    monkeypatch.setattr(client_module.time, "sleep", lambda s: None)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = tracker.experiment("s", None)
    parent = tracker.start_run(experiment, "sweep", {})
    trial = tracker.start_run(experiment, "trial-a", {TRIAL_TAG: "a"}, parent)
    tracker.log_metric_rows(trial, [(5, {"eval_loss": 0.9}, 0), (10, {"eval_loss": 0.4}, 0)])
    tracker.log_params(trial, {"model": "m", "method": "lora", "lora_r": 8})
    real, failures = tracker.client.get_metric_history, []

    def flaky(run_id, key):
        if not failures:
            failures.append(key)
            raise MlflowException("the server is restarting", error_code="TEMPORARILY_UNAVAILABLE")
        return real(run_id, key)

    monkeypatch.setattr(tracker.client, "get_metric_history", flaky)
    table = leaderboard_table(tracker, experiment, parent, "eval_loss", "min")
    assert failures == ["eval_loss"], "the first read failed"
    from rich.console import Console

    screen = Console(record=True, width=200)
    screen.print(table)
    shown = screen.export_text()
    assert "0.4" in shown, "the best evaluation, read despite the failed first read"
    assert "lora r=8" in shown, "the method the trial trained, with its rank"


def test_spooled_writes_replay_once_with_real_ids_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a store without an artifact root keeps artifacts under ./mlruns
    monkeypatch.setenv("FINESWEEP_TRACKING_RETRY_S", "0.2")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    spool_dir = tmp_path / "sweep" / "tracking-spool"
    tracker = Tracker(down, spool_dir)

    experiment = tracker.experiment("offline", None)
    parent = tracker.start_run(experiment, "sweep", {"finesweep.kind": "sweep"})
    trial = tracker.start_run(experiment, "trial-1", {TRIAL_TAG: "t1"}, parent)
    assert all(is_placeholder(i) for i in (experiment, parent, trial))
    assert tracker.trial_run(experiment, parent, "t1") == trial  # a restarted trial finds its run while offline
    tracker.log_params(parent, {"learning_rate": 0.01, "model": "tiny"})
    tracker.log_json(parent, {"name": "offline"}, "sweep.json")
    card = tmp_path / "README.md"
    card.write_text("model card")
    tracker.log_file(parent, card, "export")
    card.unlink()  # the spool kept its own copy
    for step in (5, 10, 15):
        tracker.log_metrics(trial, {"eval_loss": 1.0 / step}, step)
    assert tracker.last_step(trial, "eval_loss") == 15
    tracker.set_tags(trial, {END_STATE_TAG: "diverged"})
    tracker.finish(trial, "FAILED")
    # The controller's close comes after the trial recorded its own end: at replay it must change nothing.
    tracker.close_if_running(trial, {END_STATE_TAG: "stopped_early_at_step_15"}, "FINISHED")
    tracker.set_tags(parent, {"finesweep.best_run_id": trial})
    tracker.finish(parent)
    assert tracker.trial_runs(experiment, parent) == []  # a read degrades to "none known"
    spool = Spool(spool_dir)
    written = spool.pending()
    assert written == 14

    with pytest.raises(TrackingUnavailable):  # still down: sync stops and marks nothing as replayed
        replay(spool_dir, down)
    assert spool.pending() == written

    store = f"sqlite:///{tmp_path / 'store.db'}"
    report = replay(spool_dir, store)
    assert report.skipped == [] and sum(report.replayed.values()) == written
    assert set(report.created) == {experiment, parent, trial}
    ids = spool.ids()
    from mlflow import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([ids[experiment]])
    assert sorted(r.info.run_id for r in runs) == sorted([ids[parent], ids[trial]])
    trial_run, parent_run = client.get_run(ids[trial]), client.get_run(ids[parent])
    assert trial_run.data.tags[PARENT_TAG] == ids[parent] and trial_run.data.tags[TRIAL_TAG] == "t1"
    assert trial_run.data.tags[END_STATE_TAG] == "diverged" and trial_run.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(ids[trial], "eval_loss")] == [5, 10, 15]
    assert parent_run.info.status == "FINISHED" and parent_run.data.params["model"] == "tiny"
    assert parent_run.data.tags["finesweep.best_run_id"] == ids[trial]
    assert {a.path for a in client.list_artifacts(ids[parent])} == {"sweep.json", "export"}

    again = replay(spool_dir, store)  # idempotent: every line is marked replayed
    assert sum(again.replayed.values()) == 0 and spool.pending() == 0
    assert len(client.search_runs([ids[experiment]])) == 2
    assert len(client.get_metric_history(ids[trial], "eval_loss")) == 3

    # After the sync, the same ids (from Tune's results, say) reach the real runs directly, not the spool.
    online = Tracker(store, spool_dir)
    online.log_metrics(trial, {"eval_loss": 0.01}, 20)
    assert spool.pending() == 0 and online.last_step(trial, "eval_loss") == 20
    assert online.trial_run(experiment, parent, "t1") == ids[trial]


def test_a_refused_write_raises_instead_of_spooling(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    monkeypatch.chdir(tmp_path)
    tracker = Tracker(f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "spool")
    with pytest.raises(MlflowException):  # no such run: retrying or replaying would fail the same way
        tracker.log_metrics("0" * 32, {"eval_loss": 1.0}, 1)
    assert Spool(tmp_path / "spool").pending() == 0


def _start_server(port: int, data_dir: Path, cwd: Path) -> subprocess.Popen:
    """mlflow/start-server.sh on loopback, in its own process group (so it can be killed whole)."""
    env = {**os.environ, "MLFLOW_PORT": str(port), "MLFLOW_DATA_DIR": str(data_dir), "MLFLOW_WORKERS": "1",
           "PYTHON": sys.executable}
    return subprocess.Popen(["bash", str(REPO / "mlflow" / "start-server.sh")], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_until_up(port: int) -> None:
    get_json(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1", 90)


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def _post_json(url: str, body: dict) -> dict:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _runs(url: str, experiment_id: str) -> list[dict]:
    return _post_json(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id], "max_results": 1000})\
        .get("runs", [])


def _tag(run: dict, key: str) -> str | None:
    return next((t["value"] for t in run["data"].get("tags", []) if t["key"] == key), None)


def _history(url: str, run_id: str, key: str) -> list[int]:
    query = urllib.parse.urlencode({"run_id": run_id, "metric_key": key, "max_results": 1000})
    return [m["step"] for m in get_json(f"{url}/api/2.0/mlflow/metrics/get-history?{query}", 10).get("metrics", [])]


def _wait_for_first_evaluation(url: str, sweep: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sweep.poll() is None:
        try:
            experiment = get_json(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny", 1)
            if any(m["key"] == "eval_accuracy" for r in _runs(url, experiment["experiment"]["experiment_id"])
                   for m in r["data"].get("metrics", [])):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("no trial evaluation reached the server while the sweep ran")


def _tune_steps(sweep_dir: Path) -> dict[str, list[int]]:
    """Every evaluation step each trial reported to Tune, from Tune's own result files."""
    steps = {}
    for result in sweep_dir.glob("tune/*/trial-*/result.json"):
        lines = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if lines:
            steps[lines[0]["trial_id"]] = [int(line["step"]) for line in lines]
    return steps


def test_a_sweep_survives_its_tracking_server_going_down_and_sync_replays_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("FINESWEEP_TRACKING_RETRY_S", RETRY_BUDGET)  # reaches the CLI, Ray and the trials
    port, data_dir = free_port(), tmp_path / "server"
    url = f"http://127.0.0.1:{port}"
    server = _start_server(port, data_dir, tmp_path)  # it takes seconds to answer: build the rest meanwhile
    try:
        tiny.classification_folder(tmp_path)
        # Three trials on two cores: the third starts while the server is down (its run begins as a placeholder).
        # One model in one precision: one memory probe, not four.
        sweep_file = (SWEEP.replace("num_trials: 6", "num_trials: 3").replace("eval_every_steps: 5", "eval_every_steps: 10")
                      .replace("max_steps: 30", "max_steps: 120").replace("precision: [fp32, bf16]", "precision: [fp32]")
                      .replace("quantization: [int8, onnx-int8]", "quantization: [none]"))  # not under test
        (tmp_path / "sweep.yaml").write_text("\n".join(line for line in sweep_file.splitlines() if "tiny-b" not in line))
        _wait_until_up(port)
        sweep = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml", "--tracking-uri",
                                  url], cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_first_evaluation(url, sweep, 240)
            _stop(server)  # mid-sweep: trials are training and logging
            out, err = sweep.communicate(timeout=400)
        finally:
            if sweep.poll() is None:
                sweep.kill()
    finally:
        _stop(server)
    assert sweep.returncode == 0, out[-3000:] + err[-3000:]
    sweep_dir = tmp_path / "runs" / "tiny"
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
    assert "finesweep sync" in out, out[-3000:]

    still_down = finesweep("sync", "sweep.yaml", cwd=tmp_path)
    assert still_down.returncode == 1 and "did not answer" in still_down.stderr, still_down.stdout + still_down.stderr

    server = _start_server(port, data_dir, tmp_path)  # the same port and data: the runs made before the outage
    try:
        _wait_until_up(port)
        synced = finesweep("sync", "sweep.yaml", cwd=tmp_path)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert "replayed" in synced.stdout and "log_batch" in synced.stdout
        state = json.loads((sweep_dir / "sweep-state.json").read_text())
        runs = _runs(url, state["experiment_id"])
        parents = [r for r in runs if not _tag(r, PARENT_TAG)]
        assert [p["info"]["run_id"] for p in parents] == [state["parent_run_id"]]
        assert parents[0]["info"]["status"] == "FINISHED"
        trials = [r for r in runs if _tag(r, PARENT_TAG) == state["parent_run_id"]]
        reported = _tune_steps(sweep_dir)
        assert sorted(_tag(r, TRIAL_TAG) for r in trials) == sorted(reported)  # each trial's run exists once
        for run in trials:
            steps = _history(url, run["info"]["run_id"], "eval_accuracy")
            assert steps == reported[_tag(run, TRIAL_TAG)], (steps, reported)  # every evaluation, none twice
            assert _tag(run, END_STATE_TAG) and run["info"]["status"] in {"FINISHED", "FAILED"}
        summary = json.loads((sweep_dir / "summary.json").read_text())
        assert _tag(parents[0], "finesweep.best_run_id") == summary["best"]["mlflow_run_id"]
        assert summary["best"]["mlflow_run_id"] in {r["info"]["run_id"] for r in trials}

        again = finesweep("sync", "sweep.yaml", cwd=tmp_path)
        assert again.returncode == 0 and "nothing to replay" in again.stdout, again.stdout + again.stderr
        assert len(_runs(url, state["experiment_id"])) == len(runs)
    finally:
        _stop(server)
