"""The memory probe: for each (model, precision, method) the largest micro-batch that fits the budget.

The search is real: every candidate micro-batch runs real training steps in a separate probe
process. It tries the largest micro-batch the sweep can use first (most sweeps fit there in one
attempt), then bisects between the last fit and the first failure. A failed attempt replaces the
probe process, so leftover memory never makes a later attempt fail.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import time
from dataclasses import asdict, dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

from finesweep.search.device import Device
from finesweep.spaces import SweepConfig, parse_bytes
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest

log = logging.getLogger(__name__)

SAFETY_MARGIN = 0.10  # a fit needs peak x (1 + margin) <= budget: trials add data loading and fragmentation
# One timed step is noisy: a smaller micro-batch replaces a larger one only when clearly faster.
THROUGHPUT_TOLERANCE = 0.03


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
    best_micro_batch: int = 0  # the fitting micro-batch with the best samples/s (see fastest_batch)
    micro_batch: int = 0  # what trials use: best or max, by resources.micro_batch (set on every read)
    eval_batch_size: int = 0  # confirmed by a no_grad forward attempt (see find_eval_batch)
    seed_prediction: int = 0  # the memory model's first guess from the seed batches, for the record
    search_attempts: int = 0  # the first attempts, which found the max; then throughput candidates and eval
    margin: float = SAFETY_MARGIN

    @property
    def key(self) -> str:
        return combination_key(self.model, self.precision, self.method)

    @property
    def probe_steps(self) -> int:
        return sum(a.get("steps", 0) for a in self.attempts)

    def attempt_at(self, batch: int) -> dict[str, Any] | None:
        return next((a for a in self.attempts if a["batch"] == batch and a.get("mode", "train") == "train"), None)

    @property
    def samples_per_second(self) -> float:
        """Measured samples/s of the micro-batch the trials use."""
        attempt = self.attempt_at(self.micro_batch or self.max_micro_batch)
        return attempt["batch"] / attempt["seconds_per_step"] if attempt and attempt["seconds_per_step"] else 0.0

    def choose(self, policy: str) -> "ProbeResult":
        """This result with micro_batch set by the policy ("fastest" or "largest")."""
        return replace(self, micro_batch=self.max_micro_batch if policy == "largest" else self.best_micro_batch)


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


SEED_BATCHES = (4, 16)  # spread apart so the per-sample slope stands above allocator noise; powers of two, so
# they double as throughput candidates


@dataclass
class MaxSearch:
    """One search for the largest fitting micro-batch: every attempt, and the bracket (last fit, first failure)."""

    worker: Any
    base: ProbeRequest
    cap: int
    limit: float  # the budget less the safety margin: a fit needs peak <= limit
    attempts: list[ProbeAttempt] = field(default_factory=list)
    last_fit: int = 0
    first_fail: int = 0  # cap + 1 until something above the last fit fails
    seed_prediction: int = 0  # what the memory model fitted on the seed batches predicted
    _stalls: int = 0

    @property
    def open(self) -> bool:
        return self.first_fail - self.last_fit > 1

    def measure(self, batch: int) -> bool:
        """Run one real attempt; a failure replaces the probe process so it cannot poison the next one
        (a CUDA out-of-memory error can leave memory behind; a fresh process costs about 4 s here)."""
        attempt = self.worker.attempt(_with_batch(self.base, batch))
        self.attempts.append(attempt)
        if attempt.error and not attempt.out_of_memory:
            raise ProbeError(f"probe of {self.base.candidate['name']} at micro-batch {batch} failed: {attempt.error}")
        ok = _fits(attempt, self.limit)
        if not ok:
            self.worker.replace()
        return ok

    def fits(self, batch: int) -> bool:
        """Measure `batch` and narrow the bracket with the answer."""
        ok = self.measure(batch)
        edge = batch in (self.last_fit + 1, self.first_fail - 1)
        self.last_fit, self.first_fail = (batch, self.first_fail) if ok else (self.last_fit, batch)
        # A guess at the bracket's edge that leaves it open means the model is off by more than one sample;
        # two in a row would creep one batch at a time, so the next guess bisects instead.
        self._stalls = self._stalls + 1 if edge and self.open else 0
        return ok

    def next_batch(self) -> int:
        """The memory model's guess, kept strictly inside the bracket; bisection when it has no guess or stalls."""
        predicted = predict_max_batch(self.attempts, self.limit)
        if predicted is None or self._stalls >= 2:
            return (self.last_fit + self.first_fail) // 2
        return min(max(predicted, self.last_fit + 1), self.first_fail - 1)


def _fits(attempt: ProbeAttempt, limit: float) -> bool:
    return not attempt.out_of_memory and attempt.peak_bytes <= limit


def predict_max_batch(attempts: list[ProbeAttempt], limit: float) -> int | None:
    """Fit peak = fixed + per_sample x batch through the two measured points nearest the limit; solve for it."""
    measured = [a for a in attempts if a.mode == "train" and not a.out_of_memory and a.peak_bytes > 0]
    fitting = sorted((a for a in measured if a.peak_bytes <= limit), key=lambda a: a.batch)
    failing = sorted((a for a in measured if a.peak_bytes > limit), key=lambda a: a.batch)
    # Interpolate across the bracket when one is known (most accurate); else extrapolate from the two largest fits.
    pair = [fitting[-1], failing[0]] if fitting and failing else (fitting + failing)[-2:]
    if len(pair) < 2 or pair[0].batch == pair[1].batch:
        return None
    (b1, p1), (b2, p2) = ((a.batch, a.peak_bytes) for a in pair)
    per_sample = (p2 - p1) / (b2 - b1)
    if per_sample <= 0:
        return None
    return math.floor(b1 + (limit - p1) / per_sample)


def find_max_micro_batch(worker, base: ProbeRequest, cap: int, budget: int) -> MaxSearch:
    """Largest batch in [1, cap] that fits `budget` less the margin: seed the memory model, then confirm and bisect.

    The seed batches fit a line through their peaks; its prediction is tried next (the cap itself when the line
    says the cap fits), then the bracket between the last fit and the first failure closes, one prediction or
    one bisection at a time, until the answer is exact.
    """
    search = MaxSearch(worker, base, cap, budget / (1 + SAFETY_MARGIN), first_fail=cap + 1)
    for batch in sorted({min(b, cap) for b in SEED_BATCHES}):
        if not search.fits(batch):
            break
    search.seed_prediction = predict_max_batch(search.attempts, search.limit) or 0
    while search.open:
        search.fits(search.next_batch())
    return search


def throughput_candidates(max_batch: int, tried: set[int]) -> list[int]:
    """The largest power of two <= max and half of it, untried: sizes every power-of-two effective batch divides."""
    if max_batch < 1:
        return []
    top = 1 << (max_batch.bit_length() - 1)
    return [b for b in (top, top // 2) if b >= 1 and b not in tried]


def fastest_batch(attempts: list[ProbeAttempt], limit: float, max_batch: int) -> int:
    """The largest fitting batch (max or a power of two) within THROUGHPUT_TOLERANCE of the best samples/s."""
    usable = [a for a in attempts if a.mode == "train" and _fits(a, limit) and a.seconds_per_step > 0
              and (a.batch == max_batch or a.batch & (a.batch - 1) == 0) and a.batch <= max_batch]
    if not usable:
        return max_batch
    best = max(a.samples_per_second for a in usable)
    return max(a.batch for a in usable if a.samples_per_second >= best * (1 - THROUGHPUT_TOLERANCE))


def find_eval_batch(worker, base: ProbeRequest, max_batch: int, budget: int) -> tuple[int, ProbeAttempt | None]:
    """Confirmed, not derived: one no_grad forward at 2x the train max; if it fails, the train max itself
    (a forward without gradients never needs more memory than a training step at the same batch)."""
    if max_batch < 1:
        return 0, None
    attempt = worker.attempt(ProbeRequest(**{**asdict(base), "batch": 2 * max_batch, "mode": "eval"}))
    if attempt.error and not attempt.out_of_memory:
        raise ProbeError(f"eval probe of {base.candidate['name']} failed: {attempt.error}")
    if _fits(attempt, budget / (1 + SAFETY_MARGIN)):
        return 2 * max_batch, attempt
    worker.replace()
    return max_batch, attempt


class ProbeError(RuntimeError):
    """A probe attempt broke for a reason other than memory (the model cannot train at all)."""


def _with_batch(request: ProbeRequest, batch: int) -> ProbeRequest:
    return ProbeRequest(**{**asdict(request), "batch": batch})


def memory_budget(config: SweepConfig, device: Device) -> int:
    """Bytes one trial may use: trials that run at once share the device, the GPU's memory (by their GPU
    fraction) or the CPU budget (equally, among max_concurrent_trials)."""
    if device.kind == "cuda":
        trials_per_gpu = max(1, round(1 / config.resources.gpus_per_trial)) if config.resources.gpus_per_trial else 1
        return device.total_memory // trials_per_gpu
    return parse_bytes(config.resources.memory_budget) // config.search.max_concurrent_trials


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
                    if fingerprint not in cached:
                        cached[fingerprint] = asdict(_probe_one(worker, base, model, cap, budget, device))
                        _write_cache(cache_file, cached)
                    result = ProbeResult(**cached[fingerprint]).choose(config.resources.micro_batch)
                    results[result.key] = result
    finally:
        worker.close()
    return results


def _probe_one(worker: ProbeWorker, base: ProbeRequest, model: str, cap: int, budget: int, device: Device) -> ProbeResult:
    started = time.perf_counter()
    search = find_max_micro_batch(worker, base, cap, budget)
    top, search_attempts = search.last_fit, len(search.attempts)
    for batch in throughput_candidates(top, {a.batch for a in search.attempts}):
        search.measure(batch)  # below the max: fits unless memory is not monotonic, which the table would show
    eval_batch, eval_attempt = find_eval_batch(worker, base, top, budget)
    attempts = search.attempts + ([eval_attempt] if eval_attempt else [])
    log.info("probe %s %s %s: max micro-batch %d in %d attempts", model, base.precision, base.method, top, len(attempts))
    return ProbeResult(model=model, precision=base.precision, method=base.method, seq_len=base.seq_len,
                       device=device.name, budget_bytes=budget, max_micro_batch=top,
                       attempts=[asdict(a) for a in attempts], seconds=time.perf_counter() - started,
                       best_micro_batch=fastest_batch(search.attempts, search.limit, top), eval_batch_size=eval_batch,
                       seed_prediction=search.seed_prediction, search_attempts=search_attempts)


def _fingerprint(request: ProbeRequest, device: Device, budget: int) -> str:
    """What a probe result depends on: the model, how it trains, the device and the libraries measuring it."""
    return json.dumps({"candidate": request.candidate, "task": request.task, "labels": request.num_labels,
                       "precision": request.precision, "method": request.method, "seq_len": request.seq_len,
                       "lora_r": request.lora_r, "cap": request.batch, "device": [device.kind, device.name, device.total_memory],
                       "budget": budget, "margin": SAFETY_MARGIN, "seeds": SEED_BATCHES,
                       "torch": version("torch"), "transformers": version("transformers")}, sort_keys=True)


def _read_cache(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_cache(path: Path, cached: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cached, indent=1))
