"""The memory probe: for each (model, precision, method) the largest micro-batch that fits the budget.

The search is real: every candidate micro-batch runs real training steps in a separate probe
process. It tries the largest micro-batch the sweep can use first (most sweeps fit there in one
attempt), then bisects between the last fit and the first failure. A failed attempt replaces the
probe process, so leftover memory never makes a later attempt fail.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from finesweep.search.probe.answers import add_to_cache, fingerprint, read_cache
from finesweep.search.probe.batch_search import (SAFETY_MARGIN, TimeBox, fastest_batch, find_eval_batch,
                                                 find_max_micro_batch, past, throughput_candidates)
from finesweep.search.probe.cores import allowed_cpus, busy_cores, contended
from finesweep.search.probe.device import Device
from finesweep.search.probe.worker import ProbeWorker
from finesweep.spaces import SweepConfig, Task, parse_bytes
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest

log = logging.getLogger(__name__)
FULL_PRECISION = "fp32"  # what a reduced precision (bf16, fp16) is judged against: it must train faster to be worth it


def attempt_speed(attempt: dict[str, Any]) -> float:
    """Samples/s of a recorded attempt (ProbeAttempt.samples_per_second, as the cache stores it); 0 when untimed."""
    return attempt["batch"] / attempt["seconds_per_step"] if attempt.get("seconds_per_step") else 0.0


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
    gradient_checkpointing: bool = False  # whether these measurements (and so the trials) recompute activations
    alternative: dict[str, Any] | None = None  # the plan measured and not chosen (resources.gradient_checkpointing: auto)
    too_slow: str | None = None  # the probe stopped after one attempt: far slower than another combination
    busy_cores: float | None = None  # cores other work kept busy as the probe started (a CPU device; see busy_cores)
    reused: bool = False  # read from the machine's cache: an earlier sweep on this machine measured it
    same_as: str | None = None  # measured on this model: the same checkpoint with another classifier head (pooling)
    cut_short: bool = False  # the probe's share of a time limit ended its search at its last fit (see probe_all)
    not_measured: bool = False  # the probe's share of a time limit was spent before its turn (see steer.stand_ins)
    # Not measured, but its precision was for another combination: these are fp32's answers for the same model and
    # method, which its trials take (steer.stand_ins); never a speed to judge the precision by
    measured_as: str | None = None

    @property
    def key(self) -> str:
        return combination_key(self.model, self.precision, self.method)

    @property
    def own_speed(self) -> bool:
        """Whether this row's speeds were measured for it (not left unmeasured, not another precision's stand-in):
        only these judge a precision or a method."""
        return not (self.not_measured or self.measured_as)

    @property
    def probe_steps(self) -> int:
        return sum(a.get("steps", 0) for a in self.attempts)

    def attempt_at(self, batch: int) -> dict[str, Any] | None:
        """The training attempt at `batch`; of two there (a first one judged too slow and timed again:
        batch_search.CONFIRM_TIMED_STEPS), the faster."""
        timed = [a for a in self.attempts if a["batch"] == batch and a.get("mode", "train") == "train"]
        return max(timed, key=attempt_speed, default=None)

    @property
    def samples_per_second(self) -> float:
        """Measured samples/s of the micro-batch the trials use."""
        attempt = self.attempt_at(self.micro_batch or self.max_micro_batch)
        return attempt_speed(attempt) if attempt else 0.0

    @property
    def weight_bytes(self) -> int:
        """The model's weights in float32, as the export saves and loads them (0: an older cache's answer)."""
        return 4 * max((a.get("parameters", 0) for a in self.attempts), default=0)

    @property
    def load_seconds(self) -> float:
        """Loading the model in the probe's process (CUDA's start and a 4-bit quantization included; 0.0: an older
        cache's answer)."""
        return max((a.get("load_seconds", 0.0) for a in self.attempts), default=0.0)

    @property
    def decode_seconds_per_token(self) -> float:
        """A causal LM's measured greedy decoding at batch 1 (0.0: not measured: a classifier, an older cache)."""
        decoded = [a for a in self.attempts if a.get("mode") == "decode" and a.get("seconds_per_step") and not a.get("error")]
        return decoded[-1]["seconds_per_step"] if decoded else 0.0

    def choose(self, policy: str) -> "ProbeResult":
        """This result with micro_batch set by the policy ("fastest" or "largest")."""
        return replace(self, micro_batch=self.max_micro_batch if policy == "largest" else self.best_micro_batch)

    def plan(self) -> dict[str, Any]:
        """The plan in a line of the table: checkpointing, micro-batch and its samples/s."""
        return {"gradient_checkpointing": self.gradient_checkpointing, "max_micro_batch": self.max_micro_batch,
                "micro_batch": self.micro_batch, "samples_per_second": round(self.samples_per_second, 2)}


def combination_key(model: str, precision: str, method: str) -> str:
    return f"{model}|{precision}|{method}"

def memory_budget(config: SweepConfig, device: Device) -> int:
    """Bytes one trial may use: trials that run at once share the device, the GPU's memory (by their GPU
    fraction) or the CPU budget (equally, among max_concurrent_trials)."""
    if device.kind == "cuda":
        # Unset gpus_per_trial: the probe measures on the whole GPU; how many trials share it follows from what it
        # measured (search/probe/sharing.py).
        trials_per_gpu = max(1, round(1 / config.resources.gpus_per_trial)) if config.resources.gpus_per_trial else 1
        return device.total_memory // trials_per_gpu
    return parse_bytes(config.resources.memory_budget) // (config.search.max_concurrent_trials or 1)


def probe_worker(config: SweepConfig, device: Device) -> ProbeWorker:
    """The probe's process for this sweep (not started): its trials' threads (resources.cpus_per_trial)."""
    return ProbeWorker(device, threads=int(config.resources.cpus_per_trial))


def probe_all(config: SweepConfig, device: Device, precisions: list[str], seq_len: int,
              num_labels: int, cache_file: Path, record_file: Path | None = None,
              seconds: float | None = None, worker: ProbeWorker | None = None) -> dict[str, ProbeResult]:
    """Probe every combination the space can sample; results are cached in `cache_file` by what they depend on
    (the machine's cache: a later sweep on this machine with the same model, precision, method, length, batches,
    memory budget, threads and libraries reads them instead of probing again), and the answers this sweep used
    are also written to `record_file` (the sweep folder's own record).

    `seconds` (the probe's share of search.time_limit): each combination gets an equal part of what is left when
    its turn comes (after the probe process's start: its imports are the share's, not the first combination's),
    and its search ends at its last fit past it (cut_short: no larger micro-batch, no recompute plan, no evaluation
    batch tried). The first precision's combinations (fp32, the others are judged by it) are always measured, and
    their search goes on to the space's smallest effective batch where that costs no more than a part; a reduced
    precision's turn after the time is spent is not_measured (steer.stand_ins: fp32's answer stands in where the
    precision was measured for another combination; a precision measured for none leaves the space). So the turns
    go method by method, each method's precisions fp32 first: every precision is measured for the first method
    before a second method's fp32 (always measured, the longest turns) spends the share, and the later methods' reduced
    precisions are the ones a short share leaves to stand-ins.

    `worker`: the probe process (probe_worker), begun earlier (measure_inputs begins it before the data); closed
    here."""
    cap = config.resources.max_micro_batch or max(config.space.effective_batch_size)
    threads = int(config.resources.cpus_per_trial)
    prober = _CachedProber(worker or probe_worker(config, device), device, memory_budget(config, device), cap,
                           config.resources.micro_batch, cache_file, config.search.min_relative_speed, threads,
                           record_file=record_file)
    ordered = sorted(precisions, key=lambda p: p != FULL_PRECISION)  # fp32 first: others are judged by it
    turns = [(model, precision, method.value) for model in config.model_names for method in config.space.method
             for precision in ordered]
    end = time.monotonic() + seconds if seconds is not None else None
    floor = min(min(config.space.effective_batch_size), cap)  # below it every step accumulates (TimeBox.floor)
    results: dict[str, ProbeResult] = {}
    try:
        for index, (model, precision, method) in enumerate(turns):
            if end is not None and past(end) and precision != ordered[0]:
                results[combination_key(model, precision, method)] = _not_measured(model, precision, method,
                                                                                   seq_len, device, prober.budget)
                continue
            prober.turn = None if end is None else Turn(end, len(turns) - index, bounded=precision != ordered[0],
                                                        floor=floor)
            base = ProbeRequest(candidate=config.candidate(model).model_dump(), task=config.data.task.value,
                                num_labels=num_labels, precision=precision, method=method, seq_len=seq_len,
                                batch=cap, trust_remote_code=config.trust_remote_code,
                                freeze_embeddings=config.space.freezes_embeddings(config.data.task, method))
            result = checkpointing_plan(functools.partial(prober.measure, base),
                                        config.resources.gradient_checkpointing, cap)
            results[result.key] = result
    finally:
        prober.worker.close()
    return results


@dataclass
class Turn:
    """A combination's turn under a time limit: its TimeBox is drawn when its first attempt is due (after the probe
    process has started), once per turn (the recompute plan, where measured, shares it)."""

    share_end: float  # time.monotonic() when the probe's share ends
    turns_left: int  # this one included
    bounded: bool
    floor: int
    _box: TimeBox | None = field(default=None, init=False, repr=False)

    def box(self) -> TimeBox:
        if self._box is None:
            seconds = max(self.share_end - time.monotonic(), 0.0) / self.turns_left
            self._box = TimeBox(time.monotonic() + seconds, seconds, self.share_end, self.floor, self.bounded)
        return self._box


def _not_measured(model: str, precision: str, method: str, seq_len: int, device: Device, budget: int) -> ProbeResult:
    return ProbeResult(model=model, precision=precision, method=method, seq_len=seq_len, device=device.name,
                       budget_bytes=budget, max_micro_batch=0, not_measured=True)


@dataclass
class _CachedProber:
    """Probes one request at a time, each answer kept in the cache file under what it depends on."""

    worker: ProbeWorker
    device: Device
    budget: int
    cap: int
    policy: str  # resources.micro_batch
    cache_file: Path
    min_relative_speed: float  # search.min_relative_speed: below it, a combination is too slow to probe further
    threads: int = 1  # resources.cpus_per_trial: the probe's (and each trial's) threads
    fastest: dict[tuple[str, int], tuple[float, str]] = field(default_factory=dict)  # (model, batch) -> samples/s, key
    record_file: Path | None = None  # the sweep's own copy of the answers it used (cache_file is the machine's)
    full_precision: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (model, method, batch) -> fp32's
    decoded: set[str] = field(default_factory=set)  # models whose decoding is timed (once a model: see _probe_one)
    measured_here: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # fingerprint -> (model, answer)
    turn: Turn | None = None  # the time of the combination now probed (see probe_all); None: no time limit

    def measure(self, base: ProbeRequest, checkpointing: bool) -> ProbeResult:
        request = replace(base, gradient_checkpointing=checkpointing)
        key = fingerprint(request, self.device, self.budget, self.threads)
        name = request.candidate["name"]
        if key in self.measured_here:  # another head on the same checkpoint: its answer, not a second probe
            same_as, entry = self.measured_here[key]
            return self._answer(ProbeResult(**entry), name, reused=False, same_as=same_as)
        entry = read_cache(self.cache_file).get(key)
        if entry is not None and _stopped_on_one_timing(entry):
            entry = None
        busy = self._measured_under_load(entry)
        reused = entry is not None and busy is None
        if not reused:
            self.worker.start()
            result = _probe_one(self.worker, request, name, self.cap, self.budget, self.device,
                                functools.partial(self.too_slow, precision=request.precision, method=request.method),
                                self.turn.box() if self.turn else None, decode=name not in self.decoded)
            entry = asdict(replace(result, busy_cores=busy))
            if not (result.cut_short or result.not_measured):  # a later sweep with the time to measure it all should
                add_to_cache(self.cache_file, key, entry)
        self.measured_here[key] = (name, entry)
        if self.record_file is not None:
            add_to_cache(self.record_file, key, entry)
        return self._answer(ProbeResult(**entry), name, reused=reused)

    def _answer(self, result: ProbeResult, name: str, reused: bool, same_as: str | None = None) -> ProbeResult:
        result = replace(result, model=name, reused=reused, same_as=same_as).choose(self.policy)
        self._remember(result)
        return result

    def _measured_under_load(self, entry: dict[str, Any] | None) -> float | None:
        """On a CPU, how many cores other work keeps busy now, when a probe is due: the combination is not in the
        cache, or its cached speeds were measured under load (they would slow every plan made from them) and the
        machine is quieter now. None when no probe is due or the device is a GPU. A probe that starts with too few
        free cores for its threads is warned about; its speeds are measured again by a later sweep."""
        if self.device.kind != "cpu" or (entry is not None and not contended(entry.get("busy_cores"), self.threads)):
            return None
        busy = busy_cores()
        if entry is not None and (busy is None or busy >= entry["busy_cores"]):
            return None  # no quieter than when the cached speeds were taken: measuring again would not help
        if contended(busy, self.threads):
            log.warning("probe: %.1f of %d CPU cores are busy with other work while the probe times training with "
                        "%d thread(s): its speeds, and the plan made from them, will be pessimistic. A later sweep "
                        "measures them again when the machine is quieter.", busy, len(allowed_cpus()), self.threads)
        return busy

    def too_slow(self, attempt: ProbeAttempt, model: str, precision: str = FULL_PRECISION,
                 method: str = "") -> str | None:
        """Why a combination's first attempt says it trains too slowly to be worth probing further: below
        min_relative_speed x the samples/s another combination of the same model reached at the same batch, or a
        reduced precision slower than fp32 at the same batch and method (steer.dominated_precisions drops it)."""
        if attempt.samples_per_second <= 0:
            return None
        best, key = self.fastest.get((model, attempt.batch), (0.0, ""))
        if attempt.samples_per_second < self.min_relative_speed * best:
            return (f"{attempt.samples_per_second:.2f} samples/s at micro-batch {attempt.batch}, against {best:.2f} "
                    f"for {key}")
        full = self.full_precision.get((model, method, attempt.batch), 0.0)
        if precision != FULL_PRECISION and attempt.samples_per_second < full:
            return (f"{attempt.samples_per_second:.2f} samples/s at micro-batch {attempt.batch}, slower than fp32's "
                    f"{full:.2f}")
        return None

    def _remember(self, result: ProbeResult) -> None:
        if result.decode_seconds_per_token:
            self.decoded.add(result.model)
        for attempt in result.attempts:
            speed = attempt_speed(attempt)
            place = (result.model, attempt["batch"])
            if attempt.get("mode", "train") != "train":
                continue
            if speed > self.fastest.get(place, (0.0, ""))[0]:
                self.fastest[place] = (speed, result.key)
            if result.precision == FULL_PRECISION:  # the faster of two timings at one batch, as attempt_at reads
                fp32 = (result.model, result.method, attempt["batch"])
                self.full_precision[fp32] = max(speed, self.full_precision.get(fp32, 0.0))


def _stopped_on_one_timing(entry: dict[str, Any]) -> bool:
    """A cached answer whose combination was judged too slow on one timed step (cached before the verdict was
    confirmed by a second timing, batch_search.CONFIRM_TIMED_STEPS, or where a time limit left none): measured again."""
    trained = [a for a in entry.get("attempts", []) if a.get("mode", "train") == "train"]
    return bool(entry.get("too_slow")) and len(trained) < 2


def checkpointing_plan(measured: Callable[[bool], ProbeResult], setting: str, cap: int) -> ProbeResult:
    """The plan a combination's trials train with (resources.gradient_checkpointing). auto: without checkpointing
    when the largest effective batch (`cap`) fits in one micro-batch (recomputing would only cost time); else both
    plans measured and the one with more samples/s wins (a larger micro-batch against the recompute's cost)."""
    if setting != "auto":
        return measured(setting == "on")
    plain = measured(False)
    if plain.max_micro_batch >= cap or plain.too_slow or plain.cut_short or plain.not_measured:
        # One micro-batch holds the largest effective batch, the space drops this combination, or the time limit
        # ended the search before memory said anything against larger micro-batches.
        return plain
    if (static := static_bytes(plain)) is not None and static * (1 + plain.margin) > plain.budget_bytes:
        log.info("probe %s: no recompute plan measured: weights, gradients and optimizer state alone take about "
                 "%.2f GiB of the %.2f GiB budget, and recomputing only saves activations", plain.key,
                 static / 2**30, plain.budget_bytes / 2**30)
        return plain
    recomputed = measured(True)
    chosen, other = (recomputed, plain) if recomputed.samples_per_second > plain.samples_per_second else (plain, recomputed)
    log.info("probe %s: gradient checkpointing %s (%.1f samples/s against %.1f)", chosen.key,
             "on" if chosen.gradient_checkpointing else "off", chosen.samples_per_second, other.samples_per_second)
    return replace(chosen, alternative=other.plan())


def static_bytes(result: ProbeResult) -> float | None:
    """A step's memory at any batch size (weights, gradients, optimizer state): the intercept of the line through
    the peaks of the two smallest training micro-batches that reported one (a CPU reports its peak even past the
    budget; a GPU's out-of-memory reports none). None without two such peaks."""
    peaks = sorted({a["batch"]: a["peak_bytes"] for a in result.attempts  # one peak per batch size
                    if a.get("mode", "train") == "train" and a.get("peak_bytes") and not a.get("out_of_memory")}.items())
    if len(peaks) < 2:
        return None
    (small, small_peak), (large, large_peak) = peaks[0], peaks[1]
    per_sample = (large_peak - small_peak) / (large - small)
    return small_peak - per_sample * small


def _probe_one(worker: ProbeWorker, base: ProbeRequest, model: str, cap: int, budget: int, device: Device,
               too_slow: Callable[[ProbeAttempt, str], str | None] | None = None,
               box: TimeBox | None = None, decode: bool = True) -> ProbeResult:
    """`decode`: a causal LM's greedy decoding is timed too (the export's answers' cost). Once a model is enough: the
    export decodes the full-precision model whatever the trials trained (search/budget/export_time.py), and each
    timing cost about 2 s of the LLM example's 60-s share."""
    started = time.perf_counter()
    search = find_max_micro_batch(worker, base, cap, budget,
                                  functools.partial(too_slow, model=model) if too_slow else None, box)
    if search.timed_out:
        log.info("probe %s %s %s: its first attempt ran past its share of the time limit and was stopped", model,
                 base.precision, base.method)
        return replace(_not_measured(model, base.precision, base.method, base.seq_len, device, budget),
                       attempts=[asdict(a) for a in search.attempts], seconds=time.perf_counter() - started)
    top, search_attempts = search.last_fit, len(search.attempts)
    if search.too_slow or search.cut_short:
        reason = (f"too slow: {search.too_slow}" if search.too_slow else
                  "its share of the time limit spent (larger micro-batches not tried)")
        log.info("probe %s %s %s: stopped at micro-batch %d, %s", model, base.precision, base.method, top, reason)
        eval_batch, eval_attempt = top, None  # a forward without gradients fits where the training step did
        if search.cut_short and top and not (box and box.bounded):
            # fp32's evaluation speed prices the export and every evaluation (a forward pass: a fraction of the steps
            # just measured). Without it the plan took 3x the training speed, and MiniLM evaluated at 5x: the plain
            # file's export was predicted at 64-68 s, took 34-45, and the command ended 25-36 s under its limit.
            eval_attempt = worker.attempt(replace(base, batch=top, mode="eval"))
            eval_attempt = None if eval_attempt.error or eval_attempt.out_of_memory else eval_attempt
    else:
        for batch in throughput_candidates(top, {a.batch for a in search.attempts}):
            search.measure(batch)  # below the max: fits unless memory is not monotonic, which the table would show
        eval_batch, eval_attempt = find_eval_batch(worker, base, top, budget)
    attempts = search.attempts + ([eval_attempt] if eval_attempt else [])
    if decode and base.task == Task.causal_lm.value and top >= 1 and not search.too_slow:
        attempts.append(worker.attempt(replace(base, batch=1, mode="decode")))
    log.info("probe %s %s %s: max micro-batch %d in %d attempts", model, base.precision, base.method, top, len(attempts))
    return ProbeResult(model=model, precision=base.precision, method=base.method, seq_len=base.seq_len,
                       device=device.name, budget_bytes=budget, max_micro_batch=top,
                       attempts=[asdict(a) for a in attempts], seconds=time.perf_counter() - started,
                       best_micro_batch=fastest_batch(search.attempts, search.limit, top), eval_batch_size=eval_batch,
                       seed_prediction=search.seed_prediction, search_attempts=search_attempts,
                       gradient_checkpointing=base.gradient_checkpointing, too_slow=search.too_slow,
                       cut_short=search.cut_short)
