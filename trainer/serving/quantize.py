"""Quantize a full-precision checkpoint and save it as a folder plain transformers loads: bitsandbytes int8 or
NF4, or torchao int8 weight-only (a CPU deployment path); or an ONNX Runtime dynamic-int8 folder, the CPU path that
serves faster than full precision (onnx_runtime.py for a classifier, onnx_decoder.py for a causal LM); or a causal LM
as a GGUF file for llama.cpp (gguf_export.py).

The quantization libraries are required here and only here (`_quantization_config`), so machines without them
still import finesweep, and a missing install fails with one clear message. torchao is an optional extra: once
installed, transformers imports it in every process (seconds, and warnings), so finesweep never depends on it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from finesweep.spaces import Quantization, Task
from finesweep.trainer.models import HEAD_MODULES, auto_config, auto_model_class, copy_tokenizer
from finesweep.trainer.serving import gguf_export
from finesweep.trainer.serving.onnx_decoder import export_int8 as export_decoder
from finesweep.trainer.serving.onnx_runtime import export_int8

if TYPE_CHECKING:
    from transformers import BitsAndBytesConfig, PreTrainedModel

log = logging.getLogger(__name__)

# bitsandbytes' CPU 4-bit kernel (AVX-512 bf16) repacks a weight [out, in] at its first forward pass and needs
# out % 32 == 0 and in % blocksize == 0; other layers crash there, so NF4 leaves them in full precision.
NF4_BLOCKSIZE = 64
CPU_PACK_ROWS = 32


def quantize(full_dir: Path, method: Quantization, out_dir: Path, task: Task) -> Path:
    """Reload `full_dir` quantized with `method`, save it with its tokenizer to `out_dir`; returns `out_dir`."""
    method = Quantization(method)
    if method == Quantization.none:
        raise ValueError("quantize() needs a quantization method; Quantization.none means: export the full model only")
    full_dir, out_dir = Path(full_dir), Path(out_dir)
    if method == Quantization.onnx_int8:
        return _onnx_int8(full_dir, out_dir, task)
    if method.is_gguf:
        if install := missing_backend(method):
            raise RuntimeError(f"export quantization {method.value} needs llama-cpp-python and llama.cpp's converter: "
                               f"{install}")
        return gguf_export.export_gguf(full_dir, method, out_dir)
    model = load_quantized(full_dir, method, task)
    # Save before any forward pass: on an AVX-512 bf16 CPU the first 4-bit forward repacks the weights in place,
    # and a folder saved after it reloads degraded.
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    copy_tokenizer(full_dir, out_dir)
    log.info("%s: saved %s quantization to %s", full_dir.name, method.value, out_dir)
    return out_dir


def _onnx_int8(full_dir: Path, out_dir: Path, task: Task) -> Path:
    if Task(task) == Task.causal_lm:
        return export_decoder(full_dir, out_dir)
    return export_int8(full_dir, out_dir)


def load_quantized(full_dir: Path, method: Quantization, task: Task) -> "PreTrainedModel":
    """The full-precision folder loaded quantized with `method`. Unlike a reloaded quantized folder (which
    transformers 5 cannot save again), this model can be saved, once, before its first forward pass."""
    method = Quantization(method)
    skip = _skipped_modules(Path(full_dir), method, task)
    log.info("%s: %s keeps in full precision: %s", Path(full_dir).name, method.value, skip)
    return _load_quantized(Path(full_dir), method, task, skip)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _load_quantized(full_dir: Path, method: Quantization, task: Task, skip: list[str]) -> "PreTrainedModel":
    """The checkpoint loaded through its quantization config, weights quantized on load (in bfloat16 for the CUDA
    kernels that compute in it: tinygemm's int4, float8's scaled matmul)."""
    import torch

    device = _device()
    config = _quantization_config(method, device, skip)
    dtype = {"dtype": torch.bfloat16} if method in CUDA_CAPABILITY else {}
    return auto_model_class(task).from_pretrained(full_dir, quantization_config=config, device_map=device, **dtype)


# The CUDA compute capability each GPU-only method's kernels need: tinygemm's int4 matmul (Ampere on), float8's
# scaled matmul (Ada, Hopper on).
CUDA_CAPABILITY = {Quantization.torchao_int4: (8, 0), Quantization.torchao_fp8: (8, 9)}
# Groups of 128 input features share an int4 scale: torchao's default; a layer whose width is not a multiple keeps
# its full-precision weights (torchao skips it).
INT4_GROUP_SIZE = 128


def missing_device(method: Quantization) -> str | None:
    """Why this machine cannot make or run `method` (a GPU-only kernel without a GPU that has it), or None."""
    need = CUDA_CAPABILITY.get(Quantization(method))
    if need is None:
        return None
    import torch

    wanted = f"a CUDA GPU of compute capability {need[0]}.{need[1]} or newer"
    if not torch.cuda.is_available():
        return f"{wanted}; this machine has none"
    found = torch.cuda.get_device_capability(0)
    if found < need:
        return f"{wanted}; {torch.cuda.get_device_name(0)} has {found[0]}.{found[1]}"
    return None


# The package each method needs, and how a user gets it.
BACKENDS = {Quantization.int8: ("bitsandbytes", "pip install bitsandbytes"),
            Quantization.nf4: ("bitsandbytes", "pip install bitsandbytes"),
            Quantization.torchao_int8: ("torchao", "pip install 'finesweep[torchao]'"),
            Quantization.torchao_int4: ("torchao", "pip install 'finesweep[torchao]'"),
            Quantization.torchao_fp8: ("torchao", "pip install 'finesweep[torchao]'"),
            Quantization.onnx_int8: ("onnxruntime", "pip install onnxruntime onnx onnxscript"),
            Quantization.gguf_q8_0: ("llama-cpp-python", gguf_export.INSTALL),
            Quantization.gguf_q4_k_m: ("llama-cpp-python", gguf_export.INSTALL)}


def missing_backend(method: Quantization) -> str | None:
    """How to install the library `method` needs, or None when it is importable."""
    import importlib.util

    if Quantization(method).is_gguf:
        return gguf_export.missing_tools()
    package, install = BACKENDS.get(Quantization(method), (None, None))
    return install if package and importlib.util.find_spec(package) is None else None


def _quantization_config(method: Quantization, device: str, skip: list[str]):
    """The one place the quantization libraries are required (transformers imports them when the config is used)."""
    if install := missing_backend(method):
        raise RuntimeError(f"export quantization {method.value} needs {BACKENDS[method][0]}: {install} "
                           f"(or remove {method.value} from export.quantization)")
    if method in TORCHAO:
        return torchao_config(method, skip)
    return _bnb_config(method, device, skip)


TORCHAO = (Quantization.torchao_int8, Quantization.torchao_int4, Quantization.torchao_fp8)


def torchao_config(method: Quantization, skip: list[str]):
    """transformers' TorchAoConfig for `method`, saved as safetensors: int8 weights with activations in full
    precision (any CPU); int4 weights in groups of INT4_GROUP_SIZE packed for tinygemm, bf16 activations (the
    batch-1 decoding path torchao measures fastest on A100/H100); float8 weights and activations scaled per row
    (torch's scaled matmul, Ada and Hopper)."""
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Int4WeightOnlyConfig,
                                      Int8WeightOnlyConfig, PerRow)
    from transformers import TorchAoConfig

    quant_type = {
        Quantization.torchao_int8: Int8WeightOnlyConfig,
        Quantization.torchao_int4: lambda: Int4WeightOnlyConfig(group_size=INT4_GROUP_SIZE,
                                                                int4_packing_format="tile_packed_to_4d"),
        Quantization.torchao_fp8: lambda: Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
    }[Quantization(method)]()
    return TorchAoConfig(quant_type, modules_to_not_convert=skip)


def _bnb_config(method: Quantization, device: str, skip: list[str]) -> "BitsAndBytesConfig":
    import torch
    from transformers import BitsAndBytesConfig

    if method == Quantization.int8:
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip)
    # bf16 compute is the fast path on CUDA. On CPU float32 is asked for, but bitsandbytes' CPU 4-bit kernel casts
    # activations to bf16 after its repack anyway; the export measures the result either way.
    compute = torch.bfloat16 if device == "cuda" else torch.float32
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute, llm_int8_skip_modules=skip
    )


def _skipped_modules(full_dir: Path, method: Quantization, task: Task) -> list[str]:
    """Modules kept in full precision: heads, output embeddings, and for NF4 the layers the CPU kernel rejects.

    Passing llm_int8_skip_modules replaces transformers' default skips (lm_head), so they are added back here.
    """
    model = _meta_model(full_dir, task)
    skip = [name for name, _ in model.named_modules() if name.split(".")[-1] in HEAD_MODULES]
    skip += _output_embedding_names(model)
    if method == Quantization.nf4:
        unpackable = [name for name, shape in _linear_shapes(model) if not _cpu_packable(*shape)]
        if unpackable:
            log.info("nf4: %d layers stay full precision (shape unsupported by bitsandbytes' CPU kernel): %s",
                     len(unpackable), unpackable)
        skip += unpackable
    return sorted(set(skip))


def linear_layer_names(full_dir: Path, task: Task) -> list[str]:
    """Every layer a quantization may replace (Linear, GPT-2's Conv1D), heads included."""
    return [name for name, _ in _linear_shapes(_meta_model(Path(full_dir), task))]


def _meta_model(full_dir: Path, task: Task) -> "PreTrainedModel":
    """The architecture without weights (on the meta device), only to read module names and shapes."""
    import torch

    config = auto_config(full_dir)
    with torch.device("meta"):
        return auto_model_class(task).from_config(config)


def _output_embeddings_of(model: "PreTrainedModel"):
    get = getattr(model, "get_output_embeddings", None)
    return get() if get else None


def _output_embedding_names(model: "PreTrainedModel") -> list[str]:
    """Names of the LM head (often tied to the input embeddings, which bitsandbytes would break)."""
    head = _output_embeddings_of(model)
    return [name for name, module in model.named_modules() if head is not None and module is head]


def _linear_shapes(model: "PreTrainedModel") -> list[tuple[str, tuple[int, int]]]:
    """(name, (out_features, in_features)) of every layer bitsandbytes would replace (Linear and GPT-2's Conv1D)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    shapes = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            shapes.append((name, (module.out_features, module.in_features)))
        elif isinstance(module, Conv1D):
            shapes.append((name, (module.nf, module.weight.shape[0])))
    return shapes


def _cpu_packable(out_features: int, in_features: int) -> bool:
    return out_features % CPU_PACK_ROWS == 0 and in_features % NF4_BLOCKSIZE == 0
