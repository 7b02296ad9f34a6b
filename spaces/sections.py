"""What every section of the sweep file shares (unknown keys are errors, values frozen) and the names the file
chooses among: task, precision, method, quantization."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every section: unknown keys are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Task(str, Enum):
    classification = "classification"
    causal_lm = "causal_lm"


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class Method(str, Enum):
    full = "full"
    lora = "lora"
    qlora = "qlora"  # LoRA on a base loaded in 4-bit NF4 (bitsandbytes)

    @property
    def has_adapter(self) -> bool:
        """Whether the trial trains LoRA adapters (and samples lora_r and lora_alpha)."""
        return self in (Method.lora, Method.qlora)


class Quantization(str, Enum):
    none = "none"
    int8 = "int8"  # bitsandbytes LLM.int8
    nf4 = "nf4"  # bitsandbytes 4-bit NormalFloat
    torchao_int8 = "torchao-int8"  # torchao int8 weight-only: a CPU deployment path (optional extra `torchao`)
    torchao_int4 = "torchao-int4"  # torchao int4 weight-only, bf16 activations (tinygemm kernels): a CUDA path
    torchao_fp8 = "torchao-fp8"  # torchao float8 weights and dynamic float8 activations per row: CUDA, Ada/Hopper
    onnx_int8 = "onnx-int8"  # ONNX Runtime int8 (a classifier: dynamic; a causal LM: weight blocks, with its cache)
    # llama.cpp's GGUF files (a causal LM; extra `gguf`): 8-bit blocks, near lossless; 4-bit k-quants "medium", the
    # type most GGUF downloads for Ollama and LM Studio are in.
    gguf_q8_0 = "gguf-q8_0"
    gguf_q4_k_m = "gguf-q4_k_m"

    @property
    def is_gguf(self) -> bool:
        """A file for llama.cpp rather than a folder transformers or ONNX Runtime loads."""
        return self.value.startswith("gguf-")
