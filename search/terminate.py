"""How `finesweep run` and `resume` end on SIGTERM (a scheduler's stop, `timeout`, `kill`)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

# 128 + SIGTERM's number, as a shell reports a command a signal ended.
TERMINATED_EXIT = 128 + signal.SIGTERM


@contextmanager
def stop_cleanly_on_sigterm(sweep: Path) -> Iterator[None]:
    """SIGTERM (a scheduler's stop, `timeout`, `kill`) inside the block ends the command as an exception does: the
    probe's process is closed, Ray and MLflow shut down, and the sweep stays resumable; the command says how to go on
    and exits 143. Python's default ends the interpreter on the spot (exit -15, no word to the user), and a probe
    process mid-attempt runs on until its attempt ends. Ray, once started, sets its own handler
    (search/tuning/ray_cluster.py puts this one back)."""
    stopped = False

    def stop(signum, frame) -> None:
        nonlocal stopped
        stopped = True
        typer.secho(f"stopped by SIGTERM: `finesweep resume {sweep}` continues a search that had begun (before it, "
                    "run the sweep again: the prepared data and the probe's answers are kept)", err=True)
        raise SystemExit(TERMINATED_EXIT)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except BaseException:
        if not stopped:
            raise
    # A library may replace the SystemExit raised in its C call by its own: Ray's wait, in the middle of the search,
    # raises SystemExit(1) instead. The stop's status is 143 whatever came out.
    if stopped:
        raise SystemExit(TERMINATED_EXIT)
