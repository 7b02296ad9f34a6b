"""Measure a model on a tokenized split outside the Trainer: metrics, loss and latency, for full and quantized models."""

from __future__ import annotations

import json
import math
import statistics
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from finesweep.spaces import Task
from finesweep.trainer.metrics import accuracy_and_f1

if TYPE_CHECKING:
    import torch
    from datasets import Dataset

# Label positions the loss ignores (prompt and padding tokens of a causal LM).
IGNORE_INDEX = -100
WARM_UP_ROWS = 2  # the untimed rows before a test pass (see _warm_up)
# The rows of a test pass (a classifier's; a causal LM's where its logits allow, below).
TEST_BATCH = 32
# A causal LM's test pass holds the logits of every position over the whole vocabulary (its loss is scored row by
# row from them): at TEST_BATCH that is 32 x the longest row x the vocabulary in float32, over a GB for SmolLM2-135M
# (49,152 tokens) on 224-token chat rows, and the pass turns memory-bound: 51 such rows took 19 s at batch 32 against
# 6.5 s at batch 4 and 7.2 at 8 (2 cores, AVX-512 bf16 EPYC); three such passes put an export 48 s over its estimate.
# Its batches hold as many rows as keep those logits under this many bytes (a classifier's: a few numbers a row).
LOGITS_BATCH_BYTES = 256 * 2**20


@dataclass(frozen=True)
class RowScores:
    """What each row of a split contributed to the primary metric, in the split's own order: two models measured on
    the same rows are compared row by row (search/selection/baseline.py::gain_interval). The metric is
    sum(values) / sum(weights): a classifier's accuracy (values 1 where its prediction is right, weights 1), a causal
    LM's mean response-token loss, whose exp is the perplexity (values the row's summed loss, weights its tokens)."""

    values: np.ndarray
    weights: np.ndarray


def evaluate(model: Any, dataset: "Dataset", collate: Callable, task: Task,
             batch_size: int | None = None) -> dict[str, float]:
    """Metrics of `model` on `dataset` (rows of input_ids, attention_mask, labels), plus latency per sample: the
    wall time of the pass in batches of `batch_size` (unset: scoring_batch_size's) after an untimed warm-up on
    WARM_UP_ROWS rows, the rows taken longest first (longest_first_order).

    classification: accuracy, f1_macro, loss; causal_lm: loss (mean over response tokens) and perplexity.
    """
    return evaluate_rows(model, dataset, collate, task, batch_size)[0]


def evaluate_rows(model: Any, dataset: "Dataset", collate: Callable, task: Task,
                  batch_size: int | None = None) -> tuple[dict[str, float], RowScores]:
    """evaluate(), and what each row contributed to the primary metric (RowScores, in `dataset`'s order)."""
    import torch

    batch_size = batch_size or scoring_batch_size(model, dataset, task)

    device = model_device(model)
    model.eval()
    tally = _ClassTally() if Task(task) == Task.classification else _TokenTally()
    order = longest_first_order(dataset)
    dataset = dataset.select(order)
    _warm_up(model, dataset, collate, device)
    start = time.perf_counter()
    with torch.no_grad():
        for batch in _batches(dataset, collate, batch_size):
            batch = {key: value.to(device) for key, value in batch.items()}
            inputs = batch if tally.model_loss else {key: value for key, value in batch.items() if key != "labels"}
            tally.add(model(**inputs), batch["labels"])
    seconds = time.perf_counter() - start
    metrics = tally.result()
    metrics["latency_ms_per_sample"] = 1000 * seconds / max(len(dataset), 1)
    return metrics, _in_split_order(tally.rows(), order)


def scoring_batch_size(model: Any, dataset: "Dataset", task: Task) -> int:
    """TEST_BATCH rows a batch, or for a causal LM as many (at least one) as keep the logits of a batch of the split's
    longest rows under LOGITS_BATCH_BYTES."""
    if Task(task) != Task.causal_lm or len(dataset) == 0:
        return TEST_BATCH
    vocab = model.config.get_text_config().vocab_size
    longest = max(len(ids) for ids in dataset["input_ids"])
    return max(1, min(TEST_BATCH, LOGITS_BATCH_BYTES // (4 * vocab * max(longest, 1))))


def _in_split_order(rows: RowScores, order: list[int]) -> RowScores:
    """Rows measured in `order` (the split's row indices) put back in the split's own order."""
    values, weights = np.empty(len(order)), np.empty(len(order))
    values[order], weights[order] = rows.values, rows.weights
    return RowScores(values, weights)


# Serving speed: batch 1 over the first SPEED_ROWS rows one at a time, batch 32 over the first SPEED_BATCHES batches;
# each pass run up to SPEED_REPEATS times after an untimed one, the median kept (one pass can meet another process's
# burst), but no more passes once the timed ones took SPEED_SECONDS: on a CPU a 135M-parameter LLM's batch of 32
# takes seconds, and five passes of each shape for each variant cost the LLM example's export minutes.
SPEED_ROWS = 8
SPEED_BATCHES = 1
SPEED_REPEATS = 5
SPEED_SECONDS = 8.0


def serving_speed(model: Any, dataset: "Dataset", collate: Callable, batch_size: int = 32) -> dict[str, float]:
    """Milliseconds per sample of a forward pass as a server runs it (no labels, no loss): at batch 1 (latency) and
    at `batch_size` (the inverse of throughput), on the model's device, with the process's threads."""
    device = model_device(model)
    model.eval()
    rows = dataset.select(range(min(SPEED_BATCHES * batch_size, len(dataset))))
    singles = list(_batches(rows.select(range(min(SPEED_ROWS, len(rows)))), collate, 1))
    return {"latency_ms_batch1": _median_ms_per_sample(model, singles, device),
            f"ms_per_sample_batch{batch_size}": _median_ms_per_sample(model, list(_batches(rows, collate, batch_size)), device)}


def _median_ms_per_sample(model: Any, batches: list[dict], device: "torch.device") -> float:
    import torch

    inputs = [{key: value.to(device) for key, value in batch.items() if key != "labels"} for batch in batches]
    samples = sum(len(batch["input_ids"]) for batch in inputs)

    def one_pass() -> None:
        with torch.no_grad():
            for batch in inputs:
                model(**batch)

    return 1000 * median_seconds(one_pass, device) / max(samples, 1)


def median_seconds(work: Callable[[], Any], device: "torch.device", repeats: int = SPEED_REPEATS,
                   budget: float = SPEED_SECONDS) -> float:
    """Median wall time of `work` over up to `repeats` timed runs after an untimed one (the first run warms up:
    kernels load, bitsandbytes repacks its weights), stopping early once the timed runs took `budget` seconds."""
    import torch

    seconds: list[float] = []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # CUDA runs ahead of Python: wait for the work to be done
        if repeat:
            seconds.append(time.perf_counter() - start)
            if sum(seconds) >= budget:
                break
    return statistics.median(seconds)


def _warm_up(model: Any, dataset: "Dataset", collate: Callable, device: "torch.device") -> None:
    """An untimed pass over the first rows: first-call work (bitsandbytes repacks 4-bit weights, kernels load) is not
    latency. A few rows do it: a whole batch of an LLM's longest rows cost 10 s of each test pass on 2 cores."""
    import torch

    with torch.no_grad():
        for batch in _batches(dataset.select(range(min(WARM_UP_ROWS, len(dataset)))), collate, WARM_UP_ROWS):
            model(**{key: value.to(device) for key, value in batch.items()})


# The files that hold a folder's weights: safetensors shards, an ONNX graph (weights inside it, or beside it in
# an external-data file for graphs over 2 GB), or a GGUF file.
WEIGHT_FILES = ("*.safetensors", "*.onnx", "*.onnx.data", "*.gguf")


def folder_size_bytes(folder: Path) -> int:
    """Bytes of the weights in `folder`: the size a user downloads and loads."""
    return sum(path.stat().st_size for pattern in WEIGHT_FILES for path in Path(folder).glob(pattern))


def saved_tensors(folder: Path) -> dict[str, tuple[str, int]]:
    """(dtype, bytes on disk) of every tensor in `folder`'s *.safetensors, from the file headers (no weights are
    loaded): a quantized layer's weight and its quantization state (scales, absmax, quant_map) alike."""
    tensors = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for key, entry in header.items():
            if key != "__metadata__":
                start, end = entry["data_offsets"]
                tensors[key] = (entry["dtype"], end - start)
    return tensors


def layer_bytes(tensors: dict[str, tuple[str, int]], layers: list[str]) -> int:
    """Bytes saved for the named modules (`tensors` as saved_tensors gives them): every tensor under `<layer>.`."""
    prefixes = tuple(f"{layer}." for layer in layers)
    return sum(size for key, (_, size) in tensors.items() if key.startswith(prefixes))


def model_device(model: Any) -> "torch.device":
    """Where the inputs go: the model's own device if it is on CUDA (quantized models cannot move), else CPU."""
    import torch

    if not hasattr(model, "parameters"):  # ONNX Runtime (onnx_runtime.py, onnx_decoder.py), llama.cpp: the CPU
        return torch.device("cpu")
    device = next(model.parameters()).device
    if device.type == "cuda":
        return device
    if device.type != "cpu":
        model.to("cpu")
    return torch.device("cpu")


def longest_first_order(dataset: "Dataset") -> list[int]:
    """The row indices by token length, longest first. Each batch pads to its own longest row: batches of similar
    lengths pad little (tweets at batch 32 in split order padded to 1.7x their tokens), the metrics are the same in any
    order, and the first batch, the largest, meets an out-of-memory before any time is spent."""
    lengths = [len(ids) for ids in dataset["input_ids"]]
    return sorted(range(len(lengths)), key=lambda row: -lengths[row])


def _batches(dataset: "Dataset", collate: Callable, batch_size: int):
    """Collated batches of the model's input columns only (extra columns would reach forward())."""
    columns = [c for c in ("input_ids", "attention_mask", "labels") if c in dataset.column_names]
    for start in range(0, len(dataset), batch_size):
        rows = dataset.select(range(start, min(start + batch_size, len(dataset))))
        yield collate([{c: row[c] for c in columns} for row in rows])


class _ClassTally:
    """Predictions and size-weighted loss over the batches of a classification split."""

    model_loss = True

    def __init__(self) -> None:
        self.predicted: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.loss_sum = 0.0

    def add(self, output: Any, labels: "torch.Tensor") -> None:
        self.predicted.append(output.logits.argmax(dim=-1).cpu().numpy())
        self.labels.append(labels.cpu().numpy())
        self.loss_sum += float(output.loss) * len(labels)  # the model's loss is a batch mean

    def result(self) -> dict[str, float]:
        if not self.labels:
            return {"accuracy": math.nan, "f1_macro": math.nan, "loss": math.nan}
        predicted, labels = np.concatenate(self.predicted), np.concatenate(self.labels)
        return {**accuracy_and_f1(predicted, labels), "loss": self.loss_sum / len(labels)}

    def rows(self) -> RowScores:
        if not self.labels:
            return RowScores(np.empty(0), np.empty(0))
        right = (np.concatenate(self.predicted) == np.concatenate(self.labels)).astype(float)
        return RowScores(right, np.ones_like(right))


class _TokenTally:
    """Token-weighted loss of a causal LM: every response token counts once, however the batches fall."""

    model_loss = False  # recomputed from the logits: the model's own (a second pass over the vocabulary) is not asked

    def __init__(self) -> None:
        self.row_losses: list[np.ndarray] = []
        self.row_tokens: list[np.ndarray] = []

    def add(self, output: Any, labels: "torch.Tensor") -> None:
        import torch

        # Recompute from the logits: the model's loss is a mean per batch, and batches hold different token counts.
        logits = output.logits[:, :-1, :].float()
        targets = labels[:, 1:]
        token_losses = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
        ).reshape(targets.shape)  # 0 at ignored positions
        self.row_losses.append(token_losses.sum(dim=1).double().cpu().numpy())
        self.row_tokens.append((targets != IGNORE_INDEX).sum(dim=1).cpu().numpy().astype(float))

    def rows(self) -> RowScores:
        if not self.row_losses:
            return RowScores(np.empty(0), np.empty(0))
        return RowScores(np.concatenate(self.row_losses), np.concatenate(self.row_tokens))

    def result(self) -> dict[str, float]:
        rows = self.rows()
        tokens = rows.weights.sum()
        loss = float(rows.values.sum() / tokens) if tokens else math.nan
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)) if tokens else math.nan}
