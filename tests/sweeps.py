"""What the CLI-level tests share: the sweep files they run, the `finesweep` command as a user types it, and readers
of what a sweep leaves behind (its MLflow store, Tune's results). Tests import from here, never from each other."""

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

NUM_TRIALS = 6
EVALS_PER_TRIAL = 6

# The metric is the validation loss, not accuracy: the tiny models' early accuracies tie (all predict one class), and
# Ray's ASHA stops only a trial strictly below its rung's cut-off, so with accuracy a run could stop nothing.
SWEEP = f"""
name: tiny
seed: 1
output_root: runs
data:
  path: data.csv
  splits: {{train: 0.7, validation: 0.15, test: 0.15}}
models:
  - {{name: tiny-a, path: model}}
  - {{name: tiny-b, path: model, config_overrides: {{num_hidden_layers: 1}}, pooling: mean}}
space:
  learning_rate: {{low: 3.0e-3, high: 3.0e-2, log: true}}
  effective_batch_size: [8, 16]
  precision: [fp32, bf16]
  dropout: {{low: 0.0, high: 0.1}}
search:
  num_trials: {NUM_TRIALS}
  metric: eval_loss
  mode: min
  eval_every_steps: 5
  max_steps: {5 * EVALS_PER_TRIAL}
  asha: {{grace_period: 1, reduction_factor: 2}}
resources: {{cpus_per_trial: 1, memory_budget: 4GiB}}
export: {{quantization: [int8, onnx-int8]}}
"""


def one_model_sweep(name: str, seed: int, trials: int, every: int, steps: int, quantization: str = "int8",
                    resources: str = "") -> str:
    """A random search over the learning rate of one tiny model, no early stopping (no ASHA, no plateau: a tiny
    model's accuracy stalls at random), no baseline trial (it trains 3 epochs, not max_steps): trials whose steps a
    test can count and interrupt (the controller, a worker or a rank killed mid-trial)."""
    return f"""
name: {name}
seed: {seed}
output_root: runs
data: {{path: data.csv, splits: {{train: 0.7, validation: 0.15, test: 0.15}}}}
models: [{{name: tiny, path: model}}]
space:
  learning_rate: {{low: 3.0e-3, high: 3.0e-2, log: true}}
  effective_batch_size: [8]
  precision: [fp32]
search:
  algorithm: random
  scheduler: none
  plateau_patience: null
  baseline: "off"
  num_trials: {trials}
  metric: eval_accuracy
  mode: max
  eval_every_steps: {every}
  max_steps: {steps}
resources: {{cpus_per_trial: 1, {resources}memory_budget: 4GiB}}
export: {{quantization: [{quantization}]}}
"""


def causal_lm_sweep(name: str, seed: int, data: str, model: str, chat_template: str = "auto",
                    quantization: str = "[int8]") -> str:
    """Two short random-search trials of one causal LM (`model`: the models[] entry as YAML flow), int8 export (or
    the `quantization` list, as YAML flow)."""
    return f"""
name: {name}
seed: {seed}
output_root: runs
data:
  path: {data}
  task: causal_lm
  chat_template: {chat_template}
  splits: {{train: 0.8, validation: 0.1, test: 0.1}}
models:
  - {model}
space:
  learning_rate: {{low: 1.0e-3, high: 1.0e-2, log: true}}
  effective_batch_size: [8]
  precision: [fp32]
search:
  algorithm: random
  num_trials: 2
  eval_every_steps: 5
  max_steps: 10
resources: {{cpus_per_trial: 1, memory_budget: 4GiB}}
export: {{quantization: {quantization}, register_model: false}}
"""


REPO = Path(__file__).resolve().parents[1]


def python_path(*first: Path) -> str:
    """PYTHONPATH for a subprocess: `first`, the repository, then what the environment already had there (on a GPU
    machine, the packages unpacked beside its image's: dropping them loses pydantic and the rest)."""
    return os.pathsep.join([*map(str, first), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def finesweep(*args: str, cwd: Path, timeout: int = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, offline (nothing may come from the hub in tests); `env` adds variables."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "finesweep.search.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def git_commit(folder: Path) -> None:
    """Make `folder` a git checkout with the sweep file committed, as a user's project is: the sweep records it."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}
    for command in (["init", "-q"], ["add", "sweep.yaml"], ["commit", "-qm", "sweep"]):
        subprocess.run(["git", *command], cwd=folder, env=env, check=True)


def store(sweep_dir: Path):
    """The sweep's MLflow client (its local store) and its sweep-state.json."""
    from mlflow import MlflowClient

    state = json.loads((sweep_dir / "sweep-state.json").read_text())
    return MlflowClient(state["tracking_uri"]), state


def trial_runs(sweep_dir: Path) -> list:
    """The nested trial runs under the sweep's parent run."""
    client, state = store(sweep_dir)
    return client.search_runs([state["experiment_id"]],
                              filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")


def evaluation_steps(sweep_dir: Path) -> dict[str, list[int]]:
    """Steps of eval_accuracy per trial run, read from the sweep's MLflow store ({} before the sweep has one)."""
    if not (sweep_dir / "sweep-state.json").is_file():
        return {}
    client, _ = store(sweep_dir)
    return {r.info.run_id: sorted(m.step for m in client.get_metric_history(r.info.run_id, "eval_accuracy"))
            for r in trial_runs(sweep_dir)}


def run_tags(sweep_dir: Path, run_id: str) -> dict[str, str]:
    client, _ = store(sweep_dir)
    return client.get_run(run_id).data.tags


def metric_steps(sweep_dir: Path, run_id: str, key: str) -> list[int]:
    client, _ = store(sweep_dir)
    return [m.step for m in client.get_metric_history(run_id, key)]


def tune_results(sweep_dir: Path) -> dict[str, list[dict]]:
    """Tune's results per trial (result.json, written by the controller as each result arrives)."""
    found = {}
    for path in sweep_dir.glob("tune/*/trial-*/result.json"):
        found[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def crash_sweep(process: subprocess.Popen) -> None:
    """SIGKILL the controller and every process it started (Ray's raylet, GCS and trial workers) at once, as a
    machine crash would: a surviving trial worker would go on logging to the MLflow run the resume continues."""
    import psutil

    family = [process.pid] + [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float) -> dict:
    """GET `url` as JSON, retrying until `timeout` seconds have passed (a server that is still starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def saved_checkpoints_of_running_trials(sweep_dir: Path, on_disk: bool = True) -> dict[Path, str]:
    """trial folder -> the checkpoint Tune's newest saved state names as the trial's latest, for running trials whose
    checkpoint is on disk (`on_disk` False: whether it is or not)."""
    from finesweep.search.tuning.recovery import saved_trials

    named = {}
    for experiment in sweep_dir.glob("tune/*/"):
        for trial in saved_trials(experiment):
            if trial.status != "RUNNING" or not trial.checkpoint:
                continue
            if not on_disk or (trial.folder / trial.checkpoint).is_dir():
                named[trial.folder] = trial.checkpoint
    return named


def lose_the_saved_checkpoint(folder: Path, checkpoint: str) -> None:
    """What a controller killed at the wrong moment leaves (Tune deleted the checkpoint its saved state names, and
    registered a newer one): here the named one moves to a name newer than any on disk."""
    newest = max(int(p.name.split("_")[-1]) for p in folder.glob("checkpoint_*"))
    (folder / checkpoint).rename(folder / f"checkpoint_{newest + 1:06d}")


def forget_registered_checkpoints(experiment_dir: Path) -> None:
    """What a controller killed between a trial's result and Tune's registration of its checkpoint leaves (Tune
    registers it with a save call scheduled after the result): the newest saved state holds the trial's results, but
    its checkpoint manager none. Done here to every running trial of the state, in Tune 2.60's format (a
    cloudpickled _CheckpointManager, hex-encoded)."""
    import pickle

    import ray.cloudpickle

    state_file = max(experiment_dir.glob("experiment_state-*.json"))
    state = json.loads(state_file.read_text())
    for pair in state["trial_data"]:
        runtime = json.loads(pair[1])
        if json.loads(pair[0])["status"] != "RUNNING":
            continue
        manager = pickle.loads(bytes.fromhex(runtime["checkpoint_manager"]["value"]))
        manager._checkpoint_results, manager._latest_checkpoint_result = [], None
        runtime["checkpoint_manager"]["value"] = ray.cloudpickle.dumps(manager).hex()
        pair[1] = json.dumps(runtime)
    state_file.write_text(json.dumps(state))


def crash_when(process: subprocess.Popen, ready: Callable[[], Any], moment: str, timeout: float = 300,
               crash: Callable[[subprocess.Popen], None] | None = None) -> Any:
    """Crash the sweep (`crash`, by default crash_sweep) as soon as `ready()` returns something true, and return it;
    `moment` names it for the failure when the sweep ends first or it never comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := ready():
            (crash or crash_sweep)(process)
            return found
        assert process.poll() is None, f"the sweep ended before {moment}"
        time.sleep(0.3)
    raise AssertionError(f"the sweep never reached {moment} in {timeout:g} s")
