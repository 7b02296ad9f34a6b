"""The ONNX decoder on the lowest transformers release the range admits (5.23): its exporter named the cache's graph
inputs after the forward argument `past_key_values` (5.24 on calls it `cache`), so the decoder reads the names from
the graph.
scripts/setup.sh installs that release beside the venv (.venv/extras/transformers-<version>); these tests put it
first on PYTHONPATH in a subprocess: the decoder's own tests there, and a folder exported there decoded here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnxruntime
import pytest

from finesweep.trainer.serving.onnx_decoder import TOKEN_INPUTS, OnnxCausalLM
from tests.sweeps import REPO, python_path

# Half a minute each (the earlier transformers imported in subprocesses), for a compatibility the lock only moves
# on a transformers upgrade: `python -m pytest -m slow tests/trainer/serving/test_onnx_decoder_versions.py` then.
pytestmark = pytest.mark.slow

EARLIER = "5.23.0"
EARLIER_FOLDER = REPO / ".venv" / "extras" / f"transformers-{EARLIER}"

EXPORT_SCRIPT = """
import json, sys
import transformers
from finesweep.spaces import Quantization, Task
from finesweep.trainer.serving.quantize import quantize
quantize(sys.argv[1], Quantization.onnx_int8, sys.argv[2], Task.causal_lm)
print(json.dumps({"transformers": transformers.__version__}))
"""


def _on_earlier_transformers(*command: str) -> subprocess.CompletedProcess:
    assert (EARLIER_FOLDER / "transformers").is_dir(), \
        f"{EARLIER_FOLDER} is missing: run scripts/setup.sh (it installs transformers {EARLIER} there)"
    env = {**os.environ, "PYTHONPATH": python_path(EARLIER_FOLDER), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_decoders_tests_pass_on_the_earlier_transformers():
    version = _on_earlier_transformers("-c", "import transformers; print(transformers.__version__)")
    assert version.stdout.strip() == EARLIER, version.stderr[-2000:]
    done = _on_earlier_transformers("-m", "pytest", "-q", "-p", "no:randomly",
                                    "tests/trainer/serving/test_onnx_decoder.py")
    assert done.returncode == 0, done.stdout[-4000:]
    assert "6 passed" in done.stdout


def test_a_folder_the_earlier_transformers_exported_decodes_here(tiny_llama, tmp_path):
    """A user's folder exported before the upgrade keeps working: its graph names the cache `past_key_values`, and
    the decoder here feeds it and generates what the full model generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "model-onnx-int8"
    done = _on_earlier_transformers("-c", EXPORT_SCRIPT, str(tiny_llama), str(folder))
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"transformers": EARLIER}
    names = [entry.name for entry in onnxruntime.InferenceSession(str(folder / "model.onnx")).get_inputs()]
    cache = [name for name in names if name not in TOKEN_INPUTS]
    assert cache and all(name.startswith("input.past_key_values.layers.") for name in cache)

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    prompt = tokenizer("Hello there, how are", return_tensors="pt")["input_ids"]
    settings = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, **settings)
    got = OnnxCausalLM(folder).generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings)
    assert (got == expected).float().mean() >= 0.9, (got, expected)
