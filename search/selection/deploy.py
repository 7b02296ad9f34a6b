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
TIMINGS = tuple(SPEEDUPS)
# On a machine with a GPU the export also times every variant on the CPU: the same timings under this prefix, their
# speed-ups too, and a deploy pick of their own (`deploy.json`'s "on_cpu").
CPU_PREFIX = "cpu_"
# The timing the deploy pick ranks by: a classifier's answer at batch 1; a causal LM's generated tokens.
DEPLOY_TIMING = {Task.classification: LATENCY, Task.causal_lm: DECODE}


# Digits a metric's loss keeps: 0.7885 - 0.7785 is 0.010000000000000009 in floating point, and a drop of exactly
# export.max_metric_drop (20 of 2,000 test rows) is within it, as the option says (the quickstart's export was not).
LOSS_DIGITS = 12


def metric_loss(full: float, value: float, higher_is_better: bool) -> float:
    """How much worse `value` is than full precision's: accuracy's absolute drop, perplexity's relative rise
    (a perplexity of 40 against 38 is 5% worse). Negative when it is better."""
    return round(full - value if higher_is_better else (value - full) / full, LOSS_DIGITS)


def within_tolerance(metrics: dict[str, dict[str, float]], variant: str, task: Task, max_drop: float) -> bool:
    name, higher_is_better = PRIMARY[Task(task)]
    return metric_loss(metrics[FULL][name], metrics[variant][name], higher_is_better) <= max_drop


def with_speedups(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The metrics with each variant's speed-up over full precision for every timing in SPEEDUPS (x, > 1 is
    faster), where both were timed; CPU timings (CPU_PREFIX) give CPU speed-ups."""
    full = metrics[FULL]
    out = {}
    for variant, values in metrics.items():
        values = dict(values)
        for prefix in ("", CPU_PREFIX):
            for key, (speedup, _) in SPEEDUPS.items():
                if variant != FULL and (ratio := _ratio(full, values, prefix + key)):
                    values[prefix + speedup] = ratio
        out[variant] = values
    return out


def deploy_choice(metrics: dict[str, dict[str, float]], task: Task, max_drop: float, prefix: str = "") -> dict[str, Any]:
    """The variant to deploy and why: the fastest by the task's DEPLOY_TIMING (batch-1 latency where a variant has
    no decode timing) among the variants within the metric tolerance (full precision always qualifies). Without
    timings (an export measured before they were), full precision. With prefix CPU_PREFIX, by the CPU's timings.
    """
    name, _ = PRIMARY[Task(task)]
    preferred = DEPLOY_TIMING[Task(task)]
    timing = preferred if all(values.get(prefix + preferred) for values in metrics.values()) else LATENCY
    timed = [v for v, values in metrics.items() if values.get(prefix + timing)]
    qualified = [v for v in timed if within_tolerance(metrics, v, task, max_drop)]
    variant = min(qualified, key=lambda v: metrics[v][prefix + timing]) if qualified else FULL
    values, full = metrics[variant], metrics[FULL]
    choice = {"variant": variant, "metric": name, "value": values.get(name), "full_value": full.get(name),
              "max_metric_drop": max_drop, "ranked_by": prefix + timing,
              **{speedup: _ratio(full, values, prefix + key) for key, (speedup, _) in SPEEDUPS.items()
                 if key != DECODE or timing == DECODE}}
    choice["reason"] = _reason(choice, timing, [v for v in timed if v not in qualified], "on the CPU " if prefix else "")
    return choice


def deploy_choices(metrics: dict[str, dict[str, float]], task: Task, max_drop: float) -> dict[str, Any]:
    """deploy_choice on the device the export measured on, with the CPU's own pick under "on_cpu" where the
    variants were also timed on the CPU (a machine with a GPU)."""
    choice = deploy_choice(metrics, task, max_drop)
    if any(key.startswith(CPU_PREFIX) for values in metrics.values() for key in values):
        choice["on_cpu"] = deploy_choice(metrics, task, max_drop, CPU_PREFIX)
    return choice


def _ratio(full: dict[str, float], values: dict[str, float], key: str) -> float | None:
    return full[key] / values[key] if values.get(key) and full.get(key) else None


def _reason(choice: dict[str, Any], timing: str, too_lossy: list[str], where: str = "") -> str:
    lossy = f"; {', '.join(too_lossy)} lost more than export.max_metric_drop {choice['max_metric_drop']:g}" if too_lossy else ""
    ranked = where + SPEEDUPS[timing][1]
    if choice["variant"] == FULL:
        return f"no quantized variant is faster {ranked} within the metric tolerance{lossy}"
    speeds = [f"{choice[speedup]:.2f}x {where}{how}" for key, (speedup, how) in SPEEDUPS.items() if choice.get(speedup)]
    return (f"fastest {ranked} within export.max_metric_drop {choice['max_metric_drop']:g}: "
            f"{', '.join(speeds)} against full precision; "
            f"{choice['metric']} {choice['value']:.4g} against {choice['full_value']:.4g}{lossy}")
