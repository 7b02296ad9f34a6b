"""Token-length distribution of the training texts, and the sequence length that covers them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from finesweep.spaces import Task

COVERED_PERCENTILE = 99


def length_percentiles(prepared_folder: Path, tokenizer, task: Task, sample: int = 5000) -> dict[str, float]:
    """p50/p95/p99/max token length over (a seeded sample of) the training split, with this tokenizer."""
    from datasets import load_from_disk

    train = load_from_disk(str(prepared_folder))["train"]
    if len(train) > sample:
        train = train.shuffle(seed=0).select(range(sample))
    if task == Task.classification:
        texts = list(train["text"])
    else:
        texts = [f"{p}\n{r}" for p, r in zip(train["prompt"], train["response"])]
    lengths = np.array([len(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]])
    return {"p50": float(np.percentile(lengths, 50)), "p95": float(np.percentile(lengths, 95)),
            "p99": float(np.percentile(lengths, COVERED_PERCENTILE)), "max": float(lengths.max())}


def covering_length(percentiles: dict[str, float], model_limit: int | None) -> int:
    """The p99 length rounded up to a multiple of 8 (friendlier kernels), capped by the model's limit."""
    length = max(8, int(-(-percentiles["p99"] // 8) * 8))
    return min(length, model_limit) if model_limit else length
