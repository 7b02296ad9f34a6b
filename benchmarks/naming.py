"""The name of a benchmark's result file: <benchmark>-<data>-<cpu kind>-<date>-<commit>.json.

The CPU kind (avx512-bf16, avx512 or avx2) is what decides training speed on a CPU here, so two results of one
benchmark on two kinds sit side by side; the date and commit say which product a figure is of. Each benchmark script
imports this file by its path (the benchmarks are scripts, not a package).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu() -> str:
    """The CPU's model and its AVX-512 and AMX flags, or "AVX2 only"."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if shutil.which("lscpu") else ""
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    flags = " ".join(sorted(set(re.findall(r"avx512[a-z_0-9]*|amx[a-z_0-9]*", lscpu)))) or "AVX2 only"
    return f"{model}; {flags}"


def cpu_kind(description: str) -> str:
    """avx512-bf16, avx512 or avx2, from a CPU description that lists its flags."""
    return "avx512-bf16" if "avx512_bf16" in description else "avx512" if "avx512f" in description else "avx2"


def commit() -> str:
    """The short commit of the checkout the benchmark ran at."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def facts() -> dict:
    """What every result file records: the CPU, its cores, the date and the commit."""
    return {"cpu": cpu(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "finesweep_commit": commit()}


def result_path(folder: Path, benchmark: str, data: str, recorded: dict | None = None) -> Path:
    """folder/<benchmark>-<data>-<cpu kind>-<date>-<commit>.json, from `recorded` (what facts() returned)."""
    recorded = recorded or facts()
    kind = cpu_kind(recorded["cpu"])
    return Path(folder) / f"{benchmark}-{data}-{kind}-{recorded['date']}-{recorded['finesweep_commit']}.json"
