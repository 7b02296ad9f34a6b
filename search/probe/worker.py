"""The probe process: started once, replaced only after a failed attempt, so leftover memory never makes a later
attempt fail. Each attempt is one trainer.probe_step run in that process."""

from __future__ import annotations

import multiprocessing
from dataclasses import asdict

from finesweep.search.outputs.logs import sweep_log_file
from finesweep.search.probe.device import Device
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest, worker_main


class ProbeWorker:
    """One probe process, started once and replaced only after a failed attempt."""

    def __init__(self, device: Device, threads: int):
        self.device, self.threads = device, threads
        self._context = multiprocessing.get_context("spawn")  # fork would inherit the controller's threads
        self._process = None
        self._connection = None
        self._ready = False

    def begin(self) -> None:
        """The process started without waiting for its imports (about 5 s on 2 cores: torch and transformers): begun
        while the data is prepared on the other core, it is ready, or nearly, when the probe needs it."""
        if self._process is None:
            self._spawn()

    def start(self) -> None:
        """The process up, its libraries imported, so that an attempt timed against a deadline pays for its own steps
        only. Attempts start it themselves where it is not."""
        self.begin()
        if not self._ready:
            self._ready = True
            try:
                self._connection.recv()  # its READY: the imports are done
            except (EOFError, ConnectionResetError):
                pass  # it died starting: the first attempt reads its exit code

    def attempt(self, request: ProbeRequest, timeout: float | None = None) -> ProbeAttempt:
        """One attempt; past `timeout` seconds its process is killed and the attempt says it timed out."""
        self.start()
        try:
            self._connection.send(asdict(request))
            if timeout is not None and not self._connection.poll(max(0.0, timeout)):
                self._process.kill()  # mid-step: it would not read a request to stop
                self.close()
                return ProbeAttempt(request.batch, 0, 0.0, timed_out=True)
            return ProbeAttempt(**self._connection.recv())
        except (EOFError, ConnectionResetError, BrokenPipeError):
            self._process.join(timeout=10)
            exit_code = self._process.exitcode
            self.close()
            # SIGKILL is the kernel's out-of-memory killer: a failure to fit. Anything else is a broken probe.
            killed = exit_code == -9
            return ProbeAttempt(request.batch, 0, 0.0, out_of_memory=killed,
                                error=f"probe process ended with exit code {exit_code}")

    def replace(self) -> None:
        self.close()

    def close(self) -> None:
        if self._process is not None and not self._ready:
            self._process.kill()  # begun and never needed (every answer was in the cache): no wait for its imports
            self._process.join(timeout=10)
        elif self._process is not None:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
        self._process = self._connection = None
        self._ready = False

    def _spawn(self) -> None:
        parent, child = self._context.Pipe()
        log_file = sweep_log_file()  # the probe's library warnings go there, not to the terminal
        self._process = self._context.Process(target=worker_main, daemon=True, args=(
            child, self.device.kind, self.threads, str(log_file) if log_file else None))
        self._process.start()
        self._connection = parent
