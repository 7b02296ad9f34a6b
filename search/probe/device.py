"""Resolve the training device once, honestly, and say which precisions it can train in."""

from __future__ import annotations

import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from finesweep.spaces import Precision, SweepFileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Device:
    """The device trials train on."""

    kind: str  # "cuda" or "cpu"
    name: str
    total_memory: int  # bytes of GPU memory (cuda) or of RAM (cpu)
    count: int = 1
    bf16: bool = True
    fp16: bool = False

    def supports(self, precision: str) -> tuple[bool, str]:
        """Whether trials can train in `precision` here, and if not, why."""
        if precision == Precision.fp16.value and not self.fp16:
            return False, "fp16 mixed precision needs a CUDA GPU"
        if precision == Precision.bf16.value and not self.bf16:
            return False, f"{self.name} has no bfloat16 support"
        return True, ""


def resolve_device(use_gpu: bool = True) -> Device:
    """CUDA when torch sees a GPU (and `use_gpu`: resources.gpus_per_trial is not 0), else the CPU."""
    import torch

    if use_gpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Device("cuda", props.name, props.total_memory, torch.cuda.device_count(),
                      bf16=torch.cuda.is_bf16_supported(), fp16=True)
    return Device("cpu", cpu_identity(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


SPEED_FLAG_PREFIXES = ("avx512", "amx")  # AVX-512 (and its bf16), AMX: what makes bf16 1.6x faster than fp32, or 7x slower
SPEED_FLAGS = ("avx2", "fma")


def cpu_identity(cpuinfo: str | None = None) -> str:
    """The CPU's model and the instruction sets that decide how fast it trains. The probe's cache is keyed by the
    device's name, so speeds measured on one kind of CPU are never taken for another's (machines of the same
    cloud type differ: one has AVX-512 bf16, the next only AVX2)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.is_file() else ""
    first_cpu = cpuinfo.split("\n\n", 1)[0]
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in first_cpu.splitlines() if ":" in line)}
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    fast = sorted(f for f in flags if f.startswith(SPEED_FLAG_PREFIXES) or f in SPEED_FLAGS)
    return f"{model} [{' '.join(fast) or 'no avx2'}]"


def usable_precisions(requested: list[str], device: Device) -> list[str]:
    """The requested precisions this device trains in; each one removed is logged with its reason."""
    usable = []
    for precision in requested:
        ok, reason = device.supports(precision)
        if ok:
            usable.append(precision)
        else:
            log.warning("precision %s removed from the space: %s", precision, reason)
    if not usable:
        reasons = "; ".join(f"{p}: {device.supports(p)[1]}" for p in requested)
        raise SweepFileError(
            f"space.precision: none of {requested} can train on this machine's {device.kind} ({device.name}): "
            f"{reasons}. Add fp32 to space.precision (it trains everywhere), or run the sweep on a machine that has "
            "what the precisions need.")
    return usable


def usable_methods(requested: list[str], device: Device) -> list[str]:
    """The requested training methods this machine can run; each one removed is logged with its reason. qlora trains
    LoRA on a 4-bit base through bitsandbytes, which does so on CUDA and on x86-64 CPUs (measured with 0.50)."""
    import importlib.util

    usable = []
    for method in requested:
        if method == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
            log.warning("method qlora removed from the space: it needs bitsandbytes (pip install bitsandbytes)")
            continue
        usable.append(method)
    if not usable:
        raise SweepFileError(
            f"space.method: none of {requested} can train on this machine's {device.kind} ({device.name}): qlora "
            "needs bitsandbytes. Install it (pip install bitsandbytes), or add lora or full to space.method.")
    return usable


def check_deepspeed(stage: int, device: Device) -> None:
    """resources.deepspeed_stage needs CUDA and the deepspeed package: said before any trial runs."""
    import importlib.util

    if not stage:
        return
    missing = [need for need, ok in (("a CUDA device (and resources.gpus_per_trial not 0)", device.kind == "cuda"),
                                     ("the deepspeed package (pip install deepspeed)",
                                      importlib.util.find_spec("deepspeed") is not None)) if not ok]
    if missing:
        raise SweepFileError(
            f"resources.deepspeed_stage: ZeRO stage {stage} needs {' and '.join(missing)}, but this machine "
            f"({device.name}) has not. Install what is missing, run the sweep where it is, or set "
            "resources.deepspeed_stage: 0.")
