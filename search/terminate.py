"""How `finesweep run` and `resume` end on SIGTERM (a scheduler's stop, `timeout`, `kill`)."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

# 128 + SIGTERM's number, as a shell reports a command a signal ended.
TERMINATED_EXIT = 128 + signal.SIGTERM


def stop_cleanly_on_sigterm(sweep: Path) -> None:
    """SIGTERM (a scheduler's stop, `timeout`, `kill`) ends the command as an exception does: the probe's process is
    closed, Ray and MLflow shut down, and the sweep stays resumable. Python's default ends the interpreter on the spot
    (exit -15, no word to the user), and a probe process mid-attempt runs on until its attempt ends."""
    def stop(signum, frame) -> None:
        typer.secho(f"stopped by SIGTERM: `finesweep resume {sweep}` continues a search that had begun (before it, "
                    "run the sweep again: the prepared data and the probe's answers are kept)", err=True)
        raise SystemExit(TERMINATED_EXIT)

    signal.signal(signal.SIGTERM, stop)
