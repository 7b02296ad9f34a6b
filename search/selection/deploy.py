"""Which exported variant to deploy: the fastest at batch 1 among those whose test metric stays within
export.max_metric_drop of full precision. Pure: the export's measurements in, a choice out."""

from __future__ import annotations

from typing import Any

from finesweep.spaces import Task

FULL = "full"
# The metric each task's tolerance watches, and whether a larger value is better.
PRIMARY = {Task.classification: ("accuracy", True), Task.causal_lm: ("perplexity", False)}
LATENCY = "latency_ms_batch1"
THROUGHPUT = "ms_per_sample_batch32"


def metric_loss(full: float, value: float, higher_is_better: bool) -> float:
    """How much worse `value` is than full precision's: accuracy's absolute drop, perplexity's relative rise
    (a perplexity of 40 against 38 is 5% worse). Negative when it is better."""
    return full - value if higher_is_better else (value - full) / full


def within_tolerance(metrics: dict[str, dict[str, float]], variant: str, task: Task, max_drop: float) -> bool:
    name, higher_is_better = PRIMARY[Task(task)]
    return metric_loss(metrics[FULL][name], metrics[variant][name], higher_is_better) <= max_drop


def with_speedups(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The metrics with each variant's speed-up over full precision at batch 1 and batch 32 (x, > 1 is faster),
    where both were timed."""
    full = metrics[FULL]
    out = {}
    for variant, values in metrics.items():
        values = dict(values)
        for key, speedup in ((LATENCY, "speedup_batch1"), (THROUGHPUT, "speedup_batch32")):
            if variant != FULL and values.get(key) and full.get(key):
                values[speedup] = full[key] / values[key]
        out[variant] = values
    return out


def deploy_choice(metrics: dict[str, dict[str, float]], task: Task, max_drop: float) -> dict[str, Any]:
    """The variant to deploy and why: the lowest batch-1 latency among the variants within the metric tolerance
    (full precision always qualifies). Without latencies (an export measured before they were), full precision."""
    name, _ = PRIMARY[Task(task)]
    timed = [v for v, values in metrics.items() if values.get(LATENCY)]
    qualified = [v for v in timed if within_tolerance(metrics, v, task, max_drop)]
    variant = min(qualified, key=lambda v: metrics[v][LATENCY]) if qualified else FULL
    values, full = metrics[variant], metrics[FULL]
    choice = {"variant": variant, "metric": name, "value": values.get(name), "full_value": full.get(name),
              "max_metric_drop": max_drop, "speedup_batch1": _ratio(full, values, LATENCY),
              "speedup_batch32": _ratio(full, values, THROUGHPUT)}
    choice["reason"] = _reason(choice, [v for v in timed if v not in qualified])
    return choice


def _ratio(full: dict[str, float], values: dict[str, float], key: str) -> float | None:
    return full[key] / values[key] if values.get(key) and full.get(key) else None


def _reason(choice: dict[str, Any], too_lossy: list[str]) -> str:
    lossy = f"; {', '.join(too_lossy)} lost more than export.max_metric_drop {choice['max_metric_drop']:g}" if too_lossy else ""
    if choice["variant"] == FULL:
        return f"no quantized variant answers faster at batch 1 within the metric tolerance{lossy}"
    return (f"fastest at batch 1 within export.max_metric_drop {choice['max_metric_drop']:g}: "
            f"{choice['speedup_batch1']:.2f}x full precision at batch 1"
            + (f", {choice['speedup_batch32']:.2f}x at batch 32" if choice["speedup_batch32"] else "")
            + f"; {choice['metric']} {choice['value']:.4g} against {choice['full_value']:.4g}{lossy}")
