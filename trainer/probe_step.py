"""One probe attempt: real training steps at one micro-batch and the longest sequence, with the peak memory.

Runs inside a dedicated probe process (see `worker_main`), never in the controller or a trial, so
whatever an attempt leaves behind cannot weigh on the trials.
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from finesweep.spaces import ModelCandidate, Precision, Task
from finesweep.trainer import models
from finesweep.trainer.models import TrainingSetup

if TYPE_CHECKING:
    from finesweep.trainer.models import TrainingSetup

_WARMUP_STEPS = 1  # the first step allocates optimizer state and warms kernels: measured for memory, never timed
# A causal LM's greedy decoding, timed at batch 1 from a short random prompt: the export's answers and decode timing
# cost this per token. No formula over the training speed predicts it: a decode step reads every weight for one token
# (SmolLM2-135M on 2 cores: 37.6 ms a token, where 8x a batched token's share of a forward pass said 8 ms).
DECODE_PROBE_TOKENS = 16  # half the export's DECODE_TOKENS: about a second on 2 cores
DECODE_PROMPT_TOKENS = 48  # a short chat turn
READY = "ready"  # the probe process's first message: its libraries are imported (search/probe/worker.py)


@dataclass(frozen=True)
class ProbeRequest:
    """One combination at one micro-batch."""

    candidate: dict[str, Any]
    task: str
    num_labels: int
    precision: str
    method: str
    seq_len: int
    batch: int
    trust_remote_code: bool = False
    lora_r: int = 8
    gradient_checkpointing: bool = False
    freeze_embeddings: bool = False  # as the trials train (space.freeze_embeddings): less memory, faster steps
    mode: str = "train"  # "train": forward+backward+AdamW; "eval": one forward under no_grad; "decode": greedy tokens
    timed_steps: int = 1  # train steps timed after the warm-up one (the median is reported)


@dataclass(frozen=True)
class ProbeAttempt:
    """What one attempt measured."""

    batch: int
    peak_bytes: int
    seconds_per_step: float
    out_of_memory: bool = False
    error: str | None = None
    steps: int = 0  # steps run (forward-only ones included): the probe's cost
    mode: str = "train"
    timed_out: bool = False  # stopped at its deadline (its process killed): nothing measured
    parameters: int = 0  # the loaded model's weights (LoRA's included): the export saves and loads that many
    load_seconds: float = 0.0  # loading the model for this attempt (0: the process had it): a trial's start pays it

    @property
    def samples_per_second(self) -> float:
        return self.batch / self.seconds_per_step if self.seconds_per_step > 0 else 0.0


class MemoryGauge(Protocol):
    """Peak memory of the device the probe trains on."""

    def reset(self) -> None: ...

    def peak(self) -> int: ...


class ProcessMemoryGauge:
    """CPU: the probe process's peak resident set (VmHWM), which Linux resets through clear_refs."""

    def reset(self) -> None:
        gc.collect()
        _return_freed_memory_to_os()
        Path("/proc/self/clear_refs").write_text("5")

    def peak(self) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("VmHWM missing from /proc/self/status")


class CudaMemoryGauge:
    """CUDA: the allocator's peak (torch.cuda.max_memory_allocated)."""

    def reset(self) -> None:
        import torch

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        import torch

        return int(torch.cuda.max_memory_allocated())


def pin_malloc_thresholds() -> None:
    """Serve every large block by mmap, so memory freed by one attempt leaves the process before the next.

    glibc raises its mmap threshold after large frees, after which big tensors come from the heap and stay
    there fragmented: peaks then drift up with the history of the process (measured: +3% at a batch of 64
    after one of 128). A fixed threshold switches that adjustment off, so a peak depends on its batch only.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD


def _return_freed_memory_to_os() -> None:
    # glibc keeps freed heap pages; without a trim a small attempt after a big one reads the big one's peak.
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


class _ModelCache:
    """Keeps the last loaded model, so attempts at several batch sizes load it once."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.model = None
        self.load_seconds = 0.0  # what the latest get spent loading (0.0 when it served the kept model)

    def get(self, request: ProbeRequest, device: str):
        key = (repr(request.candidate), request.task, request.num_labels, _setup(request))
        self.load_seconds = 0.0
        if key != self.key:
            self.model, self.key = None, None
            gc.collect()
            started = time.perf_counter()
            self.model = _load(request, device)
            self.load_seconds = time.perf_counter() - started
            self.key = key
        return self.model


def _setup(request: ProbeRequest) -> "TrainingSetup":
    """What the trials of this combination train with (dropout does not change memory or speed: none here)."""
    return TrainingSetup(method=request.method, precision=request.precision, lora_r=request.lora_r,
                         lora_alpha=2 * request.lora_r, lora_dropout=0.0,
                         gradient_checkpointing=request.gradient_checkpointing,
                         freeze_embeddings=request.freeze_embeddings)


def _load(request: ProbeRequest, device: str):
    task = Task(request.task)
    labels = [str(i) for i in range(request.num_labels)] if task == Task.classification else None
    candidate = ModelCandidate(**request.candidate)
    model = models.load_trainable(candidate, task, labels, _setup(request), request.trust_remote_code, device)
    if task != Task.classification:
        return model
    return models.pad_like(model, models.load_tokenizer(candidate, request.trust_remote_code))  # as the trials pad


def run_attempt(request: ProbeRequest, cache: _ModelCache, gauge: MemoryGauge, device: str) -> ProbeAttempt:
    """Real steps at request.batch (train or eval mode); out-of-memory is a result, not a crash."""
    import torch

    model = cache.get(request, device)
    steps = _WARMUP_STEPS + request.timed_steps if request.mode == "train" else 1
    run = {"train": _train_steps, "eval": _eval_step, "decode": _decode_seconds_per_token}[request.mode]
    gauge.reset()
    try:
        seconds = run(model, request, device)
    except torch.OutOfMemoryError:
        return ProbeAttempt(request.batch, gauge.peak(), 0.0, out_of_memory=True, steps=steps, mode=request.mode,
                            parameters=_parameters(model), load_seconds=cache.load_seconds)
    return ProbeAttempt(request.batch, gauge.peak(), seconds, steps=steps, mode=request.mode,
                        parameters=_parameters(model), load_seconds=cache.load_seconds)


def _parameters(model) -> int:
    """Its weights' count as the export saves them: peft's and transformers' counts both unpack a 4-bit layer
    (bitsandbytes stores two values a byte)."""
    count = getattr(model, "get_nb_trainable_parameters", None)
    return int(count()[1]) if count else int(model.num_parameters())


def _autocast(request: ProbeRequest, device: str):
    import torch

    dtype = {Precision.bf16.value: torch.bfloat16, Precision.fp16.value: torch.float16}.get(request.precision)
    return torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None)


def _train_steps(model, request: ProbeRequest, device: str) -> float:
    """Seconds per step: the median of the timed steps (the warm-up step is measured for memory only)."""
    import torch

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    inputs = _fake_batch(model, request, device)
    seconds: list[float] = []
    try:
        for _ in range(_WARMUP_STEPS + request.timed_steps):
            start = time.perf_counter()
            with _autocast(request, device):
                loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _synchronize(device)
            seconds.append(time.perf_counter() - start)
    finally:
        del optimizer, inputs
    return statistics.median(seconds[_WARMUP_STEPS:])


def _eval_step(model, request: ProbeRequest, device: str) -> float:
    """One forward pass under no_grad, as evaluation runs it: no activations kept, no gradients."""
    import torch

    model.eval()
    inputs = _fake_batch(model, request, device)
    start = time.perf_counter()
    try:
        with torch.no_grad(), _autocast(request, device):
            model(**inputs)
        _synchronize(device)
    finally:
        del inputs
    return time.perf_counter() - start


def _decode_seconds_per_token(model, request: ProbeRequest, device: str) -> float:
    """Seconds per generated token of greedy decoding at batch 1 with the key/value cache, its prefill spread over
    the tokens as the export's decode timing counts it (trainer/serving/generate.decode_speed); after one untimed
    token (kernels, the cache's first allocation)."""
    import torch

    model.eval()
    vocab = model.config.get_text_config().vocab_size
    prompt = torch.randint(0, vocab, (1, min(DECODE_PROMPT_TOKENS, request.seq_len)), device=device)

    def generate(tokens: int) -> None:
        with torch.inference_mode(), _autocast(request, device):
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, num_beams=1,
                           max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0)
        _synchronize(device)

    generate(1)
    start = time.perf_counter()
    generate(DECODE_PROBE_TOKENS)
    return (time.perf_counter() - start) / DECODE_PROBE_TOKENS


def _synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _fake_batch(model, request: ProbeRequest, device: str) -> dict:
    """A batch of the longest sequences the trials will see (padding never shortens a probe)."""
    import torch

    vocab = model.config.get_text_config().vocab_size
    shape = (request.batch, request.seq_len)
    input_ids = torch.randint(0, vocab, shape, device=device)
    if request.task == Task.classification.value:
        labels = torch.randint(0, request.num_labels, (request.batch,), device=device)
    else:
        labels = input_ids.clone()
    return {"input_ids": input_ids, "attention_mask": torch.ones(shape, dtype=torch.long, device=device), "labels": labels}


def device_gauge(device: str | None = None) -> MemoryGauge:
    """The gauge of `device` (default: CUDA when present): the probe and the trials measure peaks the same way."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return CudaMemoryGauge() if device == "cuda" else ProcessMemoryGauge()


def worker_main(connection, device: str, threads: int, log_file: str | None = None) -> None:
    """Probe process loop: receive a ProbeRequest as a dict, answer a ProbeAttempt as a dict; None ends it.
    `log_file`: where the process's standard error goes (the sweep's log), so the warnings of the libraries it loads
    (bitsandbytes' and torchao's kernels, torch's notices) stay off the terminal; an attempt's failure comes back
    in its answer."""
    if log_file:
        stderr_to(log_file)
    import torch
    import transformers.modeling_utils  # noqa: F401 - imported before READY, so no attempt's time includes it

    torch.set_num_threads(max(1, threads))
    if device != "cuda":
        pin_malloc_thresholds()
    gauge = device_gauge(device)
    cache = _ModelCache()
    connection.send(READY)
    while (message := connection.recv()) is not None:
        request = ProbeRequest(**message)
        try:
            attempt = run_attempt(request, cache, gauge, device)
        except Exception as error:  # a broken model must not take the probe down with it
            attempt = ProbeAttempt(request.batch, 0, 0.0, error=f"{type(error).__name__}: {error}")
        connection.send(asdict(attempt))


def stderr_to(log_file: str) -> None:
    """This process's standard error appended to `log_file`: Python's writes and native libraries' alike."""
    stream = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - the process's stderr until it ends
    os.dup2(stream.fileno(), 2)
    sys.stderr = stream
