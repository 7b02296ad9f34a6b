"""Which exported variant to deploy: the fastest (a classifier at batch 1, a causal LM at greedy decoding) among
those whose test metric stays within export.max_metric_drop of full precision. Pure: measurements in, a choice out."""

from __future__ import annotations

from typing import Any

from finesweep.spaces import Task

FULL = "full"
# The metric each task's tolerance watches, and whether a larger value is better.
PRIMARY = {Task.classification: ("accuracy", True), Task.causal_lm: ("perplexity", False)}
LATENCY = "latency_ms_batch1"
THROUGHPUT = "ms_per_sample_batch32"
DECODE = "ms_per_generated_token"
# Timings (lower is faster) -> the speed-up each gives, and how the deploy reason names it.
SPEEDUPS = {LATENCY: ("speedup_batch1", "at batch 1"), THROUGHPUT: ("speedup_batch32", "at batch 32"),
            DECODE: ("speedup_decode", "at greedy decoding, batch 1")}
# The timing the deploy pick ranks by: a classifier's answer at batch 1; a causal LM's generated tokens.
DEPLOY_TIMING = {Task.classification: LATENCY, Task.causal_lm: DECODE}


def metric_loss(full: float, value: float, higher_is_better: bool) -> float:
    """How much worse `value` is than full precision's: accuracy's absolute drop, perplexity's relative rise
    (a perplexity of 40 against 38 is 5% worse). Negative when it is better."""
    return full - value if higher_is_better else (value - full) / full


def within_tolerance(metrics: dict[str, dict[str, float]], variant: str, task: Task, max_drop: float) -> bool:
    name, higher_is_better = PRIMARY[Task(task)]
    return metric_loss(metrics[FULL][name], metrics[variant][name], higher_is_better) <= max_drop


def with_speedups(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The metrics with each variant's speed-up over full precision for every timing in SPEEDUPS (x, > 1 is
    faster), where both were timed."""
    full = metrics[FULL]
    out = {}
    for variant, values in metrics.items():
        values = dict(values)
        for key, (speedup, _) in SPEEDUPS.items():
            if variant != FULL and (ratio := _ratio(full, values, key)):
                values[speedup] = ratio
        out[variant] = values
    return out


def deploy_choice(metrics: dict[str, dict[str, float]], task: Task, max_drop: float) -> dict[str, Any]:
    """The variant to deploy and why: the fastest by the task's DEPLOY_TIMING (batch-1 latency where a variant has
    no decode timing) among the variants within the metric tolerance (full precision always qualifies). Without
    timings (an export measured before they were), full precision."""
    name, _ = PRIMARY[Task(task)]
    preferred = DEPLOY_TIMING[Task(task)]
    timing = preferred if all(values.get(preferred) for values in metrics.values()) else LATENCY
    timed = [v for v, values in metrics.items() if values.get(timing)]
    qualified = [v for v in timed if within_tolerance(metrics, v, task, max_drop)]
    variant = min(qualified, key=lambda v: metrics[v][timing]) if qualified else FULL
    values, full = metrics[variant], metrics[FULL]
    choice = {"variant": variant, "metric": name, "value": values.get(name), "full_value": full.get(name),
              "max_metric_drop": max_drop, "ranked_by": timing,
              **{speedup: _ratio(full, values, key) for key, (speedup, _) in SPEEDUPS.items()
                 if key != DECODE or timing == DECODE}}
    choice["reason"] = _reason(choice, [v for v in timed if v not in qualified])
    return choice


def _ratio(full: dict[str, float], values: dict[str, float], key: str) -> float | None:
    return full[key] / values[key] if values.get(key) and full.get(key) else None


def _reason(choice: dict[str, Any], too_lossy: list[str]) -> str:
    lossy = f"; {', '.join(too_lossy)} lost more than export.max_metric_drop {choice['max_metric_drop']:g}" if too_lossy else ""
    ranked = SPEEDUPS[choice["ranked_by"]][1]
    if choice["variant"] == FULL:
        return f"no quantized variant is faster {ranked} within the metric tolerance{lossy}"
    speeds = [f"{choice[speedup]:.2f}x {where}" for key, (speedup, where) in SPEEDUPS.items() if choice.get(speedup)]
    return (f"fastest {ranked} within export.max_metric_drop {choice['max_metric_drop']:g}: "
            f"{', '.join(speeds)} against full precision; "
            f"{choice['metric']} {choice['value']:.4g} against {choice['full_value']:.4g}{lossy}")
