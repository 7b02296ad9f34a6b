"""One arm of a benchmark: a command run over its whole life (imports and model loading included), as a user's
command runs, with nothing else on the machine. Each benchmark script imports this file by its path (the benchmarks
are scripts, not a package)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(command: list[str], log: Path, cache: Path) -> tuple[float, str]:
    """Wall seconds of `command`'s whole life, run from the repository root offline, and its stdout; its output goes
    to `log`, a failure stops the benchmark. `cache`: the machine cache it reads and writes (FINESWEEP_CACHE), so that
    an arm probes as a first sweep on this machine does, or as the arm before it left it."""
    started = time.perf_counter()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "FINESWEEP_CACHE": str(cache)}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=environment)
    seconds = round(time.perf_counter() - started, 1)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{log.stem} failed (exit {done.returncode}); see {log}")
    return seconds, done.stdout
