"""The optional CPU deployment path: torchao int8 weight-only, exported, measured, reloaded with plain transformers.

torchao is an optional extra that scripts/setup.sh installs beside the venv (.venv/extras/torchao), not into it:
once importable, transformers imports it in every process. So this test runs the export in a subprocess with
that folder on PYTHONPATH, and checks here, in a process without torchao, what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TORCHAO = REPO / ".venv" / "extras" / "torchao"

EXPORT_SCRIPT = """
import json, sys
from pathlib import Path
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from finesweep.search.outputs.export import export_best
from tests.exports import BEST, classification_collate, classification_split, export_config

checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(checkpoint)
split = classification_split(tokenizer, 128)
result = export_best(config=export_config(checkpoint, quantization=("torchao-int8",)), checkpoint_dir=checkpoint,
                     tokenizer_source=checkpoint, test_split=split, collate=classification_collate(tokenizer),
                     best=BEST, out_dir=out)
model = AutoModelForSequenceClassification.from_pretrained(out / "model-torchao-int8")
types = {name: type(m.weight).__name__ for name, m in model.named_modules() if type(m).__name__ == "Linear"}
json.dump({"metrics": result.metrics, "weight_types": types}, sys.stdout)
"""


def test_torchao_int8_export_is_measured_and_keeps_the_full_models_predictions(classifier_checkpoint, tmp_path):  # noqa: F811
    assert (TORCHAO / "torchao").is_dir(), f"{TORCHAO} is missing: run scripts/setup.sh (it installs the torchao extra there)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TORCHAO), str(REPO)]), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", EXPORT_SCRIPT, str(classifier_checkpoint), str(tmp_path / "out")],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    metrics = report["metrics"]
    assert set(metrics) == {"full", "torchao-int8"}
    assert abs(metrics["torchao-int8"]["accuracy"] - metrics["full"]["accuracy"]) <= 0.02
    quantized = [name for name, kind in report["weight_types"].items() if kind == "Int8Tensor"]
    assert report["weight_types"]["classifier"] == "Parameter" and len(quantized) == len(report["weight_types"]) - 1
    assert metrics["torchao-int8"]["size_bytes"] < metrics["full"]["size_bytes"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "torchao-quantized (torchao-int8): also `pip install torchao`" in card
    config = json.loads((tmp_path / "out" / "model-torchao-int8" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "torchao"


def test_a_missing_quantization_library_is_a_sweep_file_error_before_anything_runs(tmp_path):
    """Without the extra, asking for torchao-int8 stops the sweep at once, naming the field and the fix."""
    from tests.sweeps import SWEEP, finesweep

    (tmp_path / "model").mkdir()  # the paths exist: the check under test is what stops the sweep
    (tmp_path / "data.csv").write_text("text,label\n")
    (tmp_path / "sweep.yaml").write_text(SWEEP.replace("quantization: [int8, onnx-int8]", "quantization: [int8, torchao-int8]"))
    done = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "export.quantization: torchao-int8" in done.stderr and "pip install 'finesweep[torchao]'" in done.stderr
    assert not (tmp_path / "runs").exists()
