"""A sweep started before finesweep's modules moved into subpackages (search/tune.py -> search/tuning/..., and so on)
still resumes: its Tune experiment names the old module paths, as the finesweep that started it wrote them."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from finesweep.search.tuning.moved import OLD_MODULE_PATHS, install_old_module_paths
import pytest

from tests import tiny

SWEEP = """
name: before-the-move
seed: 3
output_root: runs
data: {path: data.csv, splits: {train: 0.7, validation: 0.15, test: 0.15}}
models: [{name: tiny, path: model}]
space: {learning_rate: 1.0e-2, effective_batch_size: [8], precision: [fp32]}
search: {algorithm: tpe, num_trials: 2, metric: eval_accuracy, mode: max, eval_every_steps: 5, max_steps: 10}
resources: {cpus_per_trial: 1, memory_budget: 4GiB}
export: {quantization: [none], register_model: false}
"""
# Tune's files that hold pickles of finesweep objects: the Tuner (callbacks, stopper, searcher), the searcher's
# state (Optuna's study and sampler) and the trial generator's state (the trial name function).
PICKLES = ("tuner.pkl", "searcher-state-*.pkl", "search_gen_state-*.json")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "finesweep.search.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@contextmanager
def _saved_under_old_paths():
    """While inside, every class and function that moved pickles under its module path from before the move (what
    the old finesweep wrote: pickle stores an object's `__module__`)."""
    install_old_module_paths()
    moved = []
    for old, homes in OLD_MODULE_PATHS.items():
        for home in homes:
            for obj in vars(importlib.import_module(home)).values():
                if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == home:
                    moved.append((obj, home))
                    obj.__module__ = old
    try:
        yield
    finally:
        for obj, home in moved:
            obj.__module__ = home


def _rewrite_with_old_paths(experiment: Path) -> list[Path]:
    from ray import cloudpickle

    files = [path for pattern in PICKLES for path in experiment.glob(pattern)]
    for path in files:
        state = cloudpickle.loads(path.read_bytes())
        with _saved_under_old_paths():
            path.write_bytes(cloudpickle.dumps(state))
    return files


def test_the_old_paths_hand_out_the_objects_from_their_new_homes():
    install_old_module_paths()
    from finesweep.trainer.predict import predict  # trainer/serving's old path
    from finesweep.search.tune import make_tuner  # search/'s old flat module

    assert predict.__module__ == "finesweep.trainer.serving.predict"
    assert make_tuner.__module__ == "finesweep.search.tuning.tuner"


@pytest.mark.slow  # about a minute: a real sweep, saved, rewritten to the old paths and resumed (a one-time migration)
def test_a_sweep_saved_with_the_old_module_paths_resumes(tmp_path):
    folder = tiny.classification_folder(tmp_path, SWEEP, rows=300)
    started = _cli("run", "sweep.yaml", cwd=folder)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    sweep_dir = folder / "runs" / "before-the-move"
    experiment = next((sweep_dir / "tune").glob("tune-*"))
    files = _rewrite_with_old_paths(experiment)
    assert {p.name.split("-")[0] for p in files} >= {"tuner.pkl", "searcher", "search_gen_state"}
    tuner_state = (experiment / "tuner.pkl").read_bytes()
    assert b"finesweep.search.tune\x94" in tuner_state or b"finesweep.search.tune" in tuner_state
    assert b"finesweep.search.tuning" not in tuner_state, "every moved object now names its old module"
    # What the old paths mean to a process that does not know them: the resume below must not be that.
    plain = subprocess.run([sys.executable, "-c", "import sys; from ray import cloudpickle; "
                            "cloudpickle.loads(open(sys.argv[1], 'rb').read())", str(experiment / "tuner.pkl")],
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "finesweep.search.tune" in plain.stderr, plain.stderr[-1000:]

    resumed = _cli("resume", str(sweep_dir), cwd=folder)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming the search" in resumed.stdout
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
