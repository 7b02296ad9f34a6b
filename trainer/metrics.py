"""Evaluation metrics: accuracy and macro-F1 for classification; loss and perplexity for causal LM."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def classification_metrics(eval_pred: Any) -> dict[str, float]:
    """For `Trainer(compute_metrics=...)`: accuracy and macro-F1 over the classes present."""
    logits, labels = eval_pred.predictions, eval_pred.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    return accuracy_and_f1(np.asarray(logits).argmax(axis=-1), np.asarray(labels))


def accuracy_and_f1(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 (mean over classes seen in labels or predictions)."""
    accuracy = float((predicted == labels).mean()) if len(labels) else float("nan")
    f1s = []
    for cls in np.union1d(np.unique(labels), np.unique(predicted)):
        tp = np.sum((predicted == cls) & (labels == cls))
        fp = np.sum((predicted == cls) & (labels != cls))
        fn = np.sum((predicted != cls) & (labels == cls))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return {"accuracy": accuracy, "f1_macro": float(np.mean(f1s)) if f1s else float("nan")}


def with_perplexity(metrics: dict[str, float], prefix: str = "eval_") -> dict[str, float]:
    """Add perplexity = exp(loss) next to a causal-LM loss."""
    loss = metrics.get(f"{prefix}loss")
    if loss is not None:
        metrics[f"{prefix}perplexity"] = math.exp(min(loss, 50.0))
    return metrics
