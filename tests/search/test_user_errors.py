"""A user's mistake ends in one paragraph (where, the rule, what was found, the fix) and exit code 2, never a traceback,
and before anything loads or trains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from finesweep.search.probe.device import Device, usable_precisions
from finesweep.spaces import SweepFileError
from finesweep.spaces.loader import HUB_ID_SHAPE
from tests import tiny

SWEEP = """
name: mistakes
data: {{path: data.csv}}
models: [{{name: tiny, path: {model}}}]
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "finesweep.search.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def _user_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stderr


def test_only_precisions_this_machine_cannot_train_in_is_a_sweep_file_error():
    cpu = Device("cpu", "a test CPU", 8 * 2**30)
    with pytest.raises(SweepFileError, match=r"space.precision: none of \['fp16'\].*fp16.*CUDA.*Add fp32"):
        usable_precisions(["fp16"], cpu)
    assert usable_precisions(["fp32", "fp16"], cpu) == ["fp32"], "fp16 alone is removed when fp32 is there"


def test_a_model_path_that_does_not_exist_is_reported_before_anything_loads(tmp_path):
    tiny.write_csv(tmp_path / "data.csv", tiny.sentiment_rows(60))
    (tmp_path / "sweep.yaml").write_text(SWEEP.format(model="modle"))
    message = _user_error(_cli("data", "sweep.yaml", cwd=tmp_path))
    assert "models[0].path: nothing at 'modle'" in message and str(tmp_path) in message
    assert "1 problem:" in message, "counted as the schema's problems are"
    assert "Repo id" not in message, "not taken for a hub id"
    assert "If 'modle' names a model on the Hugging Face hub, write `hub_id: modle` in place of `path`" in message
    shaped = [value for value in ("bert-base-uncased", "HuggingFaceTB/SmolLM2-135M", "../models/x", "/srv/m", "a/b/c")
              if HUB_ID_SHAPE.fullmatch(value)]
    assert shaped == ["bert-base-uncased", "HuggingFaceTB/SmolLM2-135M"], "only a hub id's shape is told of hub_id"


def test_a_data_file_given_as_a_model_folder_is_reported(tmp_path):
    tiny.write_csv(tmp_path / "data.csv", tiny.sentiment_rows(60))
    (tmp_path / "sweep.yaml").write_text(SWEEP.format(model="data.csv"))
    message = _user_error(_cli("data", "sweep.yaml", cwd=tmp_path))
    assert "models[0].path" in message and "is a file, but a model is a folder" in message


def test_predict_on_a_folder_that_holds_no_model(tmp_path):
    message = _user_error(_cli("predict", str(tmp_path / "runs" / "export" / "model"), "hello", cwd=tmp_path))
    assert "not a saved model folder (nothing is there)" in message
    (tmp_path / "empty").mkdir()
    assert "it has no config.json" in _user_error(_cli("predict", "empty", "hello", cwd=tmp_path))


def test_a_time_limit_without_a_unit_or_beside_a_search_budget_is_refused_before_anything_runs(tmp_path):
    tiny.write_csv(tmp_path / "data.csv", tiny.sentiment_rows(60))
    (tmp_path / "model").mkdir()  # a folder, never loaded: the limit is refused first
    (tmp_path / "sweep.yaml").write_text(SWEEP.format(model="model"))
    message = _user_error(_cli("run", "sweep.yaml", "--time-limit", "10", cwd=tmp_path))
    assert "--time-limit: not a duration: '10'; write a positive number with its unit, e.g. 600s, 10m or 1.5h" in message
    (tmp_path / "both.yaml").write_text(SWEEP.format(model="model") + "search: {time_limit: 10m, time_budget_minutes: 5}\n")
    message = _user_error(_cli("run", "both.yaml", cwd=tmp_path))
    assert "search" in message and "set one of them" in message and not (tmp_path / "runs").exists()


def test_a_disk_that_fills_up_ends_in_one_paragraph_with_what_is_free_and_the_fix(tmp_path, capsys):
    """The kernel's own "No space left on device" (a write to /dev/full), one wrapped as Ray hands on a trial's error
    (as text), and one naming the file it cut: exit code 2, the file or folder, the space free, the fix; anything
    else goes on as it was."""
    import errno

    import typer

    from finesweep.search.cli import user_errors

    def ended(raiser) -> str:
        with pytest.raises(typer.Exit) as exit_:
            with user_errors():
                raiser()
        assert exit_.value.exit_code == 2
        return capsys.readouterr().err

    def kernel():
        with open("/dev/full", "w") as full:
            full.write("x")
            full.flush()

    def wrapped():
        try:
            kernel()
        except OSError as error:
            raise RuntimeError(f"ray.exceptions.RayTaskError(OSError): trial failed: {error}") from None

    cut = tmp_path / "trial" / "checkpoint_000001" / "model.safetensors"

    def named():
        raise RuntimeError("the export failed") from OSError(errno.ENOSPC, "No space left on device", str(cut))

    for message in (ended(kernel), ended(wrapped)):
        assert message.startswith("error: the disk filled up (No space left on device) under ")
        assert "GiB free there now" in message and "lower search.keep_checkpoints" in message
        assert "`finesweep resume`" in message and "Traceback" not in message
    assert f"writing {cut}: " in ended(named), "the file being written, its folder's disk measured though it is gone"
    with pytest.raises(ValueError, match="not a disk"):
        with user_errors():
            raise ValueError("not a disk")
