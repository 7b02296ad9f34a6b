"""Ray itself: a local Ray bound to 127.0.0.1, or an existing cluster at --address; Tune's environment settings."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from finesweep.search.outputs.logs import route_library_consoles
from finesweep.search.probe.cores import usable_cores
from finesweep.search.tuning import ray_compat
from finesweep.spaces import SweepFileError


def start_ray(address: str | None) -> None:
    """Join the cluster at `address`, or start a local Ray bound to 127.0.0.1 with the CPU cores the plan counted
    (cores.usable_cores: Ray's own count reads a container's quota but not a job's CPU affinity)."""
    import ray

    if ray.is_initialized():
        return
    if address is None:
        # A local Ray bound to 127.0.0.1 is reachable from this machine only; its token adds nothing.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    own_sigterm = signal.getsignal(signal.SIGTERM)
    if address:
        check_reachable(address)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
                 num_cpus=usable_cores(), **ray_compat.local_node_on_loopback())
    keep_sigterm_handler(own_sigterm)
    route_library_consoles()  # Ray's warnings (a checkpoint read back without its metrics) to the sweep's log


def keep_sigterm_handler(handler: Callable[..., object] | int | None) -> None:
    """Put back the command's own SIGTERM handler (search/terminate.py) after ray.init: Ray sets one that exits 15
    without a word, and its core worker's C++ failure handler printed a stack dump on SIGTERM before it ran (a
    scheduler's stop, `timeout`). Re-installing a Python handler replaces both for SIGTERM alone; the C++ handler
    keeps its crash reports for the signals of real faults (SIGSEGV, SIGABRT). A process without a handler of its own
    (a library user's) keeps Ray's."""
    if callable(handler) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once, clearly, when nothing listens at a HOST:PORT address (Ray itself would retry for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise SweepFileError(
            f"--address {address}: no Ray cluster answers there ({error}). Start one on that machine with "
            "`ray start --head --port PORT`, check the host and port (the head's GCS port, 6379 by default), or "
            "leave --address out to run a local Ray.") from None


def tune_environment() -> None:
    """Tune settings that are environment variables, read by the controller when the Tuner is built."""
    # Tune writes its experiment state (which checkpoint each trial has) every few seconds at best by default;
    # a controller killed in between would restart trials from older checkpoints. The state is small: save it
    # every second.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    # A trial that ends before its first evaluation (diverged at step 1, out of memory) reports no metric;
    # Tune's strict check would abort the whole sweep for it. It is recorded in MLflow and pruned in Optuna.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")


def largest_node_cpus() -> float:
    """The CPUs of the largest live node of the Ray this process joined: the most one trial can be given."""
    import ray

    return max((node["Resources"].get("CPU", 0.0) for node in ray.nodes() if node.get("Alive")), default=1.0)
