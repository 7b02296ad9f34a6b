"""The export's quantized variants: which it makes, whether this machine can make them (checked before any trial
runs), and what a user reads when one could not be made."""

from __future__ import annotations

from pathlib import Path

from finesweep.spaces import Quantization, SweepConfig, SweepFileError
from finesweep.spaces.config import ExportConfig
from finesweep.trainer.serving.quantize import missing_backend, missing_device


def quantized_methods(export: ExportConfig) -> list[Quantization]:
    """The quantized variants to make, in the order written, without none and without repeats."""
    return list(dict.fromkeys(q for q in export.resolved().quantization if q != Quantization.none))


def check_backends(config: SweepConfig) -> None:
    """Before any trial runs: every export.quantization method's library is installed (an export that fails after
    hours of search for want of a pip install would waste them)."""
    missing = {m.value: install for m in quantized_methods(config.export) if (install := missing_backend(m))}
    if missing:
        raise SweepFileError(
            f"export.quantization: {', '.join(missing)} needs a library that is not installed here. "
            f"Install it ({'; '.join(sorted(set(missing.values())))}) or remove {', '.join(missing)} from the list.")
    for method in quantized_methods(config.export):
        if reason := missing_device(method):
            raise SweepFileError(
                f"export.quantization: {method.value} runs on GPU kernels only and needs {reason}. Run the sweep "
                f"on such a machine (the export runs where `finesweep run` runs), or remove {method.value} from "
                "the list.")


def not_made_paragraph(variant: str, reason: str, kept: list[str], out_dir: Path, log_file: Path | None) -> str:
    """What a user reads when an export variant failed: which, why, what the export holds instead, what to do."""
    where = f"the traceback is in {log_file}" if log_file else "run again with --verbose for the traceback"
    return (f"{variant} could not be made ({reason}). The export in {out_dir} holds {', '.join(kept)} instead, and "
            f"its deploy pick is among them; {where}. The usual cause is a library version finesweep was not tested "
            "with: scripts/setup.sh installs the locked versions (requirements-lock.txt). Then make the variant again "
            f"without training again: finesweep export <sweep folder> --quantize {variant}.")
