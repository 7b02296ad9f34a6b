"""The memory probe: for each (model, precision, method) the largest micro-batch that fits the budget.

The search is real: every candidate micro-batch runs real training steps in a separate probe
process. It tries the largest micro-batch the sweep can use first (most sweeps fit there in one
attempt), then bisects between the last fit and the first failure. A failed attempt replaces the
probe process, so leftover memory never makes a later attempt fail.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from finesweep.search.device import Device
from finesweep.spaces import SweepConfig, parse_bytes
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest

log = logging.getLogger(__name__)

SAFETY_MARGIN = 0.10  # a fit needs peak x (1 + margin) <= budget: trials add data loading and fragmentation


@dataclass
class ProbeResult:
    """The answer for one combination."""

    model: str
    precision: str
    method: str
    seq_len: int
    device: str
    budget_bytes: int
    max_micro_batch: int  # 0: not even a micro-batch of 1 fits
    attempts: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def key(self) -> str:
        return combination_key(self.model, self.precision, self.method)

    @property
    def samples_per_second(self) -> float:
        fits = [a for a in self.attempts if a["batch"] == self.max_micro_batch]
        return fits[0]["batch"] / fits[0]["seconds_per_step"] if fits and fits[0]["seconds_per_step"] else 0.0


def combination_key(model: str, precision: str, method: str) -> str:
    return f"{model}|{precision}|{method}"


class ProbeWorker:
    """One probe process, started once and replaced only after a failed attempt."""

    def __init__(self, device: Device, threads: int):
        self.device, self.threads = device, threads
        self._context = multiprocessing.get_context("spawn")  # fork would inherit the controller's threads
        self._process = None
        self._connection = None

    def attempt(self, request: ProbeRequest) -> ProbeAttempt:
        if self._process is None:
            self._start()
        self._connection.send(asdict(request))
        try:
            return ProbeAttempt(**self._connection.recv())
        except (EOFError, ConnectionResetError):
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
        if self._process is not None:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
        self._process = self._connection = None

    def _start(self) -> None:
        from finesweep.trainer.probe_step import worker_main

        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=worker_main, args=(child, self.device.kind, self.threads), daemon=True)
        self._process.start()
        self._connection = parent


def find_max_micro_batch(worker: ProbeWorker, base: ProbeRequest, cap: int, budget: int) -> tuple[int, list[ProbeAttempt]]:
    """Largest batch in [1, cap] whose attempt fits `budget`: try cap, then bisect (last fit, first failure)."""
    attempts: list[ProbeAttempt] = []

    def fits(batch: int) -> bool:
        attempt = worker.attempt(_with_batch(base, batch))
        attempts.append(attempt)
        if attempt.error and not attempt.out_of_memory:
            raise ProbeError(f"probe of {base.candidate['name']} at micro-batch {batch} failed: {attempt.error}")
        ok = not attempt.out_of_memory and attempt.peak_bytes * (1 + SAFETY_MARGIN) <= budget
        if not ok:
            worker.replace()
        return ok

    if fits(cap):
        return cap, attempts
    last_fit, first_fail = 0, cap
    while first_fail - last_fit > 1:
        middle = (last_fit + first_fail) // 2
        last_fit, first_fail = (middle, first_fail) if fits(middle) else (last_fit, middle)
    return last_fit, attempts


class ProbeError(RuntimeError):
    """A probe attempt broke for a reason other than memory (the model cannot train at all)."""


def _with_batch(request: ProbeRequest, batch: int) -> ProbeRequest:
    return ProbeRequest(**{**asdict(request), "batch": batch})


def memory_budget(config: SweepConfig, device: Device) -> int:
    """Bytes one trial may use: the configured CPU budget, or the GPU's memory shared by the trials on it."""
    if device.kind == "cuda":
        trials_per_gpu = max(1, round(1 / config.resources.gpus_per_trial)) if config.resources.gpus_per_trial else 1
        return device.total_memory // trials_per_gpu
    return parse_bytes(config.resources.memory_budget)


def probe_all(config: SweepConfig, device: Device, precisions: list[str], seq_len: int,
              num_labels: int, cache_file: Path) -> dict[str, ProbeResult]:
    """Probe every combination the space can sample; results are cached in `cache_file` by what they depend on."""
    cached = _read_cache(cache_file)
    budget = memory_budget(config, device)
    cap = config.resources.max_micro_batch or max(config.space.effective_batch_size)
    worker = ProbeWorker(device, threads=int(config.resources.cpus_per_trial))
    results: dict[str, ProbeResult] = {}
    try:
        for model in config.model_names:
            for precision in precisions:
                for method in (m.value for m in config.space.method):
                    base = ProbeRequest(candidate=config.candidate(model).model_dump(), task=config.data.task.value,
                                        num_labels=num_labels, precision=precision, method=method, seq_len=seq_len,
                                        batch=cap, trust_remote_code=config.trust_remote_code)
                    fingerprint = _fingerprint(base, device, budget)
                    if fingerprint in cached:
                        result = ProbeResult(**cached[fingerprint])
                    else:
                        result = _probe_one(worker, base, model, cap, budget, device)
                        cached[fingerprint] = asdict(result)
                        _write_cache(cache_file, cached)
                    results[result.key] = result
    finally:
        worker.close()
    return results


def _probe_one(worker: ProbeWorker, base: ProbeRequest, model: str, cap: int, budget: int, device: Device) -> ProbeResult:
    started = time.perf_counter()
    best, attempts = find_max_micro_batch(worker, base, cap, budget)
    log.info("probe %s %s %s: max micro-batch %d in %d attempts", model, base.precision, base.method, best, len(attempts))
    return ProbeResult(model=model, precision=base.precision, method=base.method, seq_len=base.seq_len,
                       device=device.name, budget_bytes=budget, max_micro_batch=best,
                       attempts=[asdict(a) for a in attempts], seconds=time.perf_counter() - started)


def _fingerprint(request: ProbeRequest, device: Device, budget: int) -> str:
    return json.dumps([request.candidate, request.task, request.num_labels, request.precision, request.method,
                       request.seq_len, request.batch, device.name, budget, SAFETY_MARGIN], sort_keys=True)


def _read_cache(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_cache(path: Path, cached: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cached, indent=1))
