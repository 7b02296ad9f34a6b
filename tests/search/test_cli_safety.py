"""A local Ray listens on loopback only; a cluster or tracking server that does not answer is a clear error; a
SIGTERM ends the command and its processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests import tiny
from tests.sweeps import SWEEP, crash_when, finesweep, free_port

LISTENING = """
import ipaddress, json, psutil
from finesweep.search.cli import _ray_environment
_ray_environment(None)
from finesweep.search.tuning.ray_cluster import start_ray
start_ray(None)
ours = {p.pid for p in psutil.Process().children(recursive=True)}
sockets = [c.laddr.ip for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.pid in ours]
print(json.dumps(sockets))
"""


def test_a_local_ray_listens_on_loopback_only():
    done = subprocess.run([sys.executable, "-c", LISTENING], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"})
    assert done.returncode == 0, done.stderr[-3000:]
    addresses = json.loads(done.stdout.strip().splitlines()[-1])
    assert addresses, "Ray's servers were not found among the driver's child processes"
    assert all(a in {"127.0.0.1", "::ffff:127.0.0.1"} for a in addresses), addresses


def test_an_address_where_no_cluster_answers_stops_at_once(tmp_path):
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    port = free_port()
    done = finesweep("run", "sweep.yaml", "--address", f"127.0.0.1:{port}", cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers there" in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing prepared for a sweep that cannot run


def test_status_with_the_tracking_server_down_is_a_clear_error(tmp_path):
    sweep_dir = tmp_path / "runs" / "tiny"
    sweep_dir.mkdir(parents=True)
    url = f"http://127.0.0.1:{free_port()}"
    (sweep_dir / "sweep-state.json").write_text(json.dumps({
        "root": str(sweep_dir), "config": {}, "tracking_uri": url, "experiment_id": "1", "parent_run_id": "abc",
        "tune_experiment": "tune-x"}))
    env_retry = {**os.environ, "FINESWEEP_TRACKING_RETRY_S": "1"}
    done = subprocess.run([sys.executable, "-m", "finesweep.search.cli", "status", str(sweep_dir)], env=env_retry,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert url in done.stderr and "Start the tracking server" in done.stderr


def test_sigterm_during_the_probe_ends_the_command_with_143_and_leaves_no_probe_process(tmp_path):
    """A scheduler's stop (SIGTERM) mid-probe: the command says how to go on and exits 143 (Python's default: -15 and
    not a word), and the probe's process ends with it."""
    import psutil

    tiny.classification_folder(tmp_path, SWEEP, own_model=True)  # a model the machine's probe cache has not seen
    console = tmp_path / "console.txt"
    with console.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=out, stderr=subprocess.PIPE,
                                   text=True)

    def probe_process():
        """The probe's process once the probe phase has begun: it starts beside the data's preparation, whose
        imports a SIGTERM may land in (a library's bare `except:` there swallowed the stop once)."""
        if "Probing memory" not in console.read_text():
            return None
        return next((child for child in psutil.Process(process.pid).children()
                     if "spawn_main" in " ".join(child.cmdline())), None)

    probe = crash_when(process, probe_process, "the probe", timeout=120, crash=lambda p: p.send_signal(signal.SIGTERM))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    assert "stopped by SIGTERM: `finesweep resume sweep.yaml`" in stderr
    probe.wait(timeout=15)  # psutil.TimeoutExpired if it outlived the command


def test_sigterm_during_the_search_ends_the_command_with_143_and_no_stack_dump(tmp_path):
    """A scheduler's stop while trials run: ray.init sets its own SIGTERM handler (exit 15, not a word) and its C++
    failure handler dumped the stack (seen on a GPU machine during the export; here the process aborted, -6), and a
    stop landing in Ray's wait came out as SystemExit(1). The command's own stop speaks and exits 143."""
    tiny.classification_folder(tmp_path, SWEEP)
    console = tmp_path / "console.txt"
    with console.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=tmp_path,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=out, stderr=subprocess.PIPE,
                                   text=True)
    crash_when(process, lambda: "eval_loss=" in console.read_text(), "a trial's first evaluation", timeout=180,
               crash=lambda p: p.send_signal(signal.SIGTERM))
    _, stderr = process.communicate(timeout=90)
    assert process.returncode == 143, (process.returncode, stderr[-3000:])
    assert "stopped by SIGTERM: `finesweep resume sweep.yaml`" in stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr, stderr[-3000:]
