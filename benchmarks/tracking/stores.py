"""The two tracking stores of the tracking benchmark, and what a fresh worker pays to reach them.

- The embedded default (a SQLite file in the sweep folder) and a real `mlflow server` started by
  `mlflow/start-server.sh` on a free loopback port; each gets the sweep's experiment and parent run.
- Run as a script with a store (JSON), it times a fresh process's first tracking calls: what the first trial on a
  new Ray worker pays once, outside the per-trial figures of `run.py`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """mlflow/start-server.sh on a free loopback port, data in `folder`; returns once the REST API answers."""
    port = free_port()
    env = {**os.environ, "MLFLOW_PORT": str(port), "MLFLOW_DATA_DIR": str(folder), "MLFLOW_WORKERS": "1",
           "PYTHON": sys.executable}
    log = open(folder.parent / "server.log", "w")
    server = subprocess.Popen(["bash", str(REPO / "mlflow" / "start-server.sh")], env=env, cwd=folder.parent,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=5):
                return server, url
        except OSError:
            if server.poll() is not None:
                break
            time.sleep(0.5)
    stop_server(server)
    raise SystemExit(f"the MLflow server did not answer at {url}; see {folder.parent / 'server.log'}")


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group; then SIGKILL to whatever is left (its job-runner consumers can
    outlive the main process by half a minute)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    server.wait()


def group_cpu_s(pgid: int) -> float | None:
    """CPU seconds used so far by the live processes of a process group (Linux /proc); None elsewhere."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...; utime, stime are 12, 13
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def open_store(uri: str, sweep_dir: Path) -> dict[str, str]:
    """The sweep's experiment and parent run, as a sweep starts them (not part of any trial's time)."""
    from finesweep.search.tracking.spool import SPOOL_FOLDER
    from finesweep.search.tracking.client import Tracker

    sweep_dir.mkdir(parents=True, exist_ok=True)
    spool = str(sweep_dir / SPOOL_FOLDER)
    tracker = Tracker(uri, spool)
    experiment_id = tracker.experiment("tracking-benchmark", sweep_dir / "mlartifacts")
    parent = tracker.start_run(experiment_id, "sweep-benchmark", {"finesweep.kind": "sweep"})
    return {"uri": uri, "spool": spool, "experiment_id": experiment_id, "parent": parent}


def cold_calls(store: dict[str, str]) -> dict[str, float]:
    """In a fresh process (a new Ray worker's first trial): Tracker() with its import of mlflow and the first
    calls, which open the store (SQLAlchemy engine) or the HTTP connection; then the same call again, warm."""
    from finesweep.search.tracking.client import Tracker
    from finesweep.search.tracking.tags import TRIAL_TAG

    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        result = fn()
        times[name] = time.perf_counter() - started
        return result

    tracker = timed("Tracker() incl. import mlflow", lambda: Tracker(store["uri"], store["spool"]))
    timed("trial_run (first call)", lambda: tracker.trial_run(store["experiment_id"], store["parent"], "cold"))
    run_id = timed("start_run", lambda: tracker.start_run(store["experiment_id"], "trial-cold", {TRIAL_TAG: "cold"},
                                                          store["parent"]))
    timed("log_metrics", lambda: tracker.log_metrics(run_id, {"loss": 1.0}, 1))
    timed("log_metrics again", lambda: tracker.log_metrics(run_id, {"loss": 1.0}, 2))
    timed("finish", lambda: tracker.finish(run_id))
    return times


def cold_start(store: dict[str, str]) -> dict[str, float]:
    """cold_calls() in a child process, as a new worker makes them."""
    child = subprocess.run([sys.executable, __file__, json.dumps(store)], capture_output=True, text=True,
                           cwd=REPO, timeout=300)
    if child.returncode != 0:
        raise SystemExit(f"the cold-start child failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(cold_calls(json.loads(sys.argv[1]))))
