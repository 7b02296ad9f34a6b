"""Shared fixtures: tiny models and data, built once per test session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray started in a test process binds loopback only
# Ray's workers run at niceness 15, below the other xdist worker's in-process training: beside a 2-thread torch load a
# resumed trial's worker took 41 s to start (1.5 s at niceness 0), and the deadlines the tests check (the winner's
# continuation ends by its budget) measure the other test's load, not the sweep's. Equal terms for both workers.
os.environ.setdefault("RAY_worker_niceness", "0")
# The machine cache (dequantized GGUF copies) of this session, never the user's ~/.cache/finesweep; removed at the
# session's end (they would pile up in /tmp).
if "FINESWEEP_CACHE" not in os.environ:
    os.environ["FINESWEEP_CACHE"] = tempfile.mkdtemp(prefix="finesweep-test-cache-")
    atexit.register(shutil.rmtree, os.environ["FINESWEEP_CACHE"], ignore_errors=True)

from tests import tiny  # noqa: E402


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory) -> Path:
    """Folder of a tiny BERT sequence classifier and its tokenizer."""
    return tiny.build_tiny_classifier(tmp_path_factory.mktemp("tiny-classifier"))


@pytest.fixture(scope="session")
def qlora_classifier(tmp_path_factory) -> Path:
    """The tiny BERT classifier wide enough for bitsandbytes' 4-bit layers on every CPU (tiny.QLORA_HIDDEN)."""
    return tiny.build_tiny_classifier(tmp_path_factory.mktemp("qlora-classifier"), tiny.QLORA_HIDDEN)


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory) -> Path:
    """Folder of a tiny GPT-2 and its tokenizer (which has no pad token)."""
    return tiny.build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-causal-lm"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """Folder of a tiny Llama (tied output head, grouped-query attention) and its tokenizer."""
    return tiny.build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_llama_gguf(tmp_path_factory) -> Path:
    """A tiny Llama written as a Q8_0 GGUF file (tokenizer in its metadata), alone in its folder."""
    return tiny.build_tiny_llama_gguf(tmp_path_factory.mktemp("tiny-llama-gguf"))


@pytest.fixture
def sentiment_csv(tmp_path) -> Path:
    """A small clean three-class CSV with columns text, label."""
    return tiny.write_csv(tmp_path / "sentiment.csv", tiny.sentiment_rows(300))


@pytest.fixture
def instructions_csv(tmp_path) -> Path:
    """A small prompt/response CSV."""
    return tiny.write_csv(tmp_path / "instructions.csv", tiny.instruction_rows(200))


@pytest.fixture(scope="session")
def classifier_checkpoint(tiny_classifier, tmp_path_factory) -> Path:
    """The tiny classifier with a 3-label head trained a few steps (predictions with margins), saved with labels."""
    from tests.exports import train_classifier

    return train_classifier(tiny_classifier, tmp_path_factory.mktemp("classifier-checkpoint"))


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory):
    """One real sweep through the CLI (two tiny models, ASHA, int8 export), shared by every test that reads what a
    finished sweep leaves: (project folder, sweep folder, the run command's result). About half a minute."""
    from tests.sweeps import SWEEP, finesweep, git_commit

    folder = tiny.classification_folder(tmp_path_factory.mktemp("sweep"), SWEEP, rows=600)
    git_commit(folder)
    result = finesweep("run", "sweep.yaml", cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, folder / "runs" / "tiny", result
