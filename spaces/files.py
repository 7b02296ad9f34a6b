"""The one way finesweep writes a state file (whole or not at all), and where the machine's shared cache lives."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

CACHE_ENV = "FINESWEEP_CACHE"  # the machine cache's folder, when set


def write_json_atomic(path: Path, data: Any, indent: int | None = 2) -> None:
    """Write `data` as JSON to `path` through a temporary file in the same folder and a rename, so a crash mid-write
    leaves the previous file (or none), never half of one that breaks the next command reading it. Values JSON does
    not know are written as their text (paths, dates)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique temporary name: two processes saving the same file never write into each other's temporary.
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        temporary.write_text(json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def machine_cache() -> Path:
    """The cache every sweep on this machine shares: $FINESWEEP_CACHE, else $XDG_CACHE_HOME/finesweep, else
    ~/.cache/finesweep. Its gguf/ folder holds the dequantized GGUF copies, probe/ the memory probe's answers,
    export/ what the exports took against their estimates (search/budget/export_calibration.py); deleting it (or one
    entry) only costs the next sweep the work again."""
    if folder := os.environ.get(CACHE_ENV):
        return Path(folder).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "finesweep"
