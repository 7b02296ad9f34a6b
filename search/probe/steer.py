"""The probe's speeds steer the space: a precision or method that trains far slower than the alternatives on this
machine leaves the space with its reason, as fp16 does on a CPU. bf16 is 1.6x faster than fp32 on a CPU with
AVX-512 bf16 instructions and 7x slower on one without: the rule follows the measurement, never the
machine's name."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from finesweep.search.probe.table import FULL_PRECISION, ProbeResult, combination_key
from finesweep.spaces import Method, SweepConfig

DIMENSIONS = ("precision", "method")


@dataclass(frozen=True)
class Removal:
    """A value that leaves the space, and why."""

    dimension: str  # precision or method
    value: str
    reason: str


def slow_values(probes: dict[str, ProbeResult], fraction: float) -> list[Removal]:
    """Values of precision and method whose best measured samples/s is below `fraction` x the fastest combination's,
    for every candidate model (the space is shared by the models: a value slow for one model only stays)."""
    if fraction <= 0:
        return []
    by_model: dict[str, list[ProbeResult]] = defaultdict(list)
    for result in probes.values():
        by_model[result.model].append(result)
    fastest = {model: max(r.samples_per_second for r in results) for model, results in by_model.items()}
    removals = []
    for dimension in DIMENSIONS:
        for value in sorted({getattr(r, dimension) for r in probes.values()}):
            ratios = {model: max(r.samples_per_second for r in results if getattr(r, dimension) == value) / fastest[model]
                      for model, results in by_model.items()
                      if fastest[model] > 0 and any(getattr(r, dimension) == value for r in results)}
            if ratios and all(ratio < fraction for ratio in ratios.values()):
                worst = ", ".join(f"{model} {ratio:.2f}x" for model, ratio in ratios.items())
                removals.append(Removal(dimension, value,
                                        f"the probe measured it at {worst} the samples/s of the fastest combination "
                                        f"(below search.min_relative_speed {fraction:g})"))
    return removals


def unmeasured_precisions(probes: dict[str, ProbeResult]) -> list[Removal]:
    """Reduced precisions the probe's share of a time limit left unmeasured for a combination no stand-in answers
    (run stand_ins first; fp32's combinations are probed first and always): without a speed or a micro-batch a
    trial cannot be planned."""
    missed = sorted({r.precision for r in probes.values() if r.not_measured})
    return [Removal("precision", precision, "not measured: the probe's share of search.time_limit was spent before "
                    "its turn, or its first step outlasted its part of it (each method's fp32 combination comes first)")
            for precision in missed]


def stand_ins(probes: dict[str, ProbeResult]) -> tuple[dict[str, ProbeResult], list[str]]:
    """The answers with fp32's standing in for a reduced precision's combinations that the probe's share of a time
    limit left unmeasured, where the probe measured that precision for another combination; and a note for each.

    The LLM example under `--time-limit 10m` measured bf16 LoRA (1.3x fp32's samples/s) and ran out before bf16's
    full fine-tune: dropping bf16 from the whole space for it lost LoRA's speed, and the space has one precision
    dimension for every method (Optuna refuses a categorical whose choices change from trial to trial). fp32's
    micro-batch fits the reduced precision: autocast keeps the weights in fp32 and most activations in 16 bits, its
    16-bit copy of the trained weights (2 bytes a parameter against AdamW's 16) within the probe's safety margin; a
    trial that still does not fit is recorded out of memory and the sweep goes on. fp32's speed plans its trials:
    an under-estimate where the precision trains faster. A precision measured for no combination stays unmeasured
    (unmeasured_precisions removes it); a stand-in's speed never judges its precision (measured_as)."""
    measured = {r.precision for r in probes.values() if r.own_speed}
    answers, notes = dict(probes), []
    for key, result in probes.items():
        full = probes.get(combination_key(result.model, FULL_PRECISION, result.method))
        if not result.not_measured or result.precision not in measured or full is None or full.not_measured:
            continue
        answers[key] = replace(full, precision=result.precision, measured_as=FULL_PRECISION, reused=False,
                               same_as=None, too_slow=None)
        notes.append(f"probe: {result.precision} {result.method} on {result.model} was not measured within the "
                     f"probe's share of search.time_limit; its trials take fp32's micro-batch {full.micro_batch} and "
                     f"are planned at fp32's speed ({result.precision} was measured for other combinations, so it "
                     "stays)")
    return answers, notes


def dominated_precisions(probes: dict[str, ProbeResult]) -> list[Removal]:
    """Reduced precisions (bf16, fp16) that train slower than fp32 for every candidate model measured in both: the
    same steps, less precisely, in more time. Mixed precision buys speed or memory, not accuracy; the probe's
    samples/s are at each precision's own fastest micro-batch, so a larger batch that only it fits is counted, and a
    model whose fp32 fits no micro-batch at all keeps it. (bf16 on a CPU without bf16 instructions: 0.4x fp32 on an
    AVX-512 CPU without them, 0.14x on an AVX2 one, above or below search.min_relative_speed alike.)"""
    speed = {(r.model, r.precision, r.method): r.samples_per_second for r in probes.values()}
    removals = []
    for precision in sorted({r.precision for r in probes.values()} - {FULL_PRECISION}):
        ratios = {(model, method): value / speed[(model, FULL_PRECISION, method)]
                  for (model, kind, method), value in speed.items()
                  if kind == precision and speed.get((model, FULL_PRECISION, method), 0) > 0}
        if ratios and all(ratio < 1 for ratio in ratios.values()):
            slowest = ", ".join(f"{model} {method} {ratio:.2f}x" for (model, method), ratio in ratios.items())
            removals.append(Removal("precision", precision, f"it trains slower than fp32 here ({slowest} fp32's "
                                    "samples/s), and mixed precision buys speed, not accuracy"))
    return removals


def without(config: SweepConfig, precisions: list[str], removals: list[Removal],
            probes: dict[str, ProbeResult]) -> tuple[SweepConfig, list[str], list[str]]:
    """The config and precisions with the removed values gone, and warnings for the initial points that named one:
    each moves to the fastest value kept (measured on its model when it names one)."""
    gone = {(r.dimension, r.value) for r in removals}
    precisions = [p for p in precisions if ("precision", p) not in gone]
    methods = [m for m in config.space.method if ("method", m.value) not in gone]
    points, warnings = [], []
    for i, point in enumerate(config.search.initial_points):
        moved = dict(point)
        for dimension in DIMENSIONS:
            if (dimension, str(point.get(dimension))) in gone:
                kept = precisions if dimension == "precision" else [m.value for m in methods]
                moved[dimension] = _fastest(kept, dimension, point.get("model"), probes)
                warnings.append(f"search.initial_points[{i}]: {dimension} {point[dimension]} left the space (too slow "
                                f"here); this point is tried with {moved[dimension]} instead")
        points.append(moved)
    # The space this machine can search (a value too slow here is no candidate), not a division of time.
    space = config.space.model_copy(update={"method": [Method(m) for m in methods]})
    search = config.search.model_copy(update={"initial_points": points})
    return config.model_copy(update={"space": space, "search": search}), precisions, warnings


def fastest_first(precisions: list[str], model: str, probes: dict[str, ProbeResult]) -> list[str]:
    """The precisions, the fastest the probe measured on `model` first (ties in the space's order, unmeasured ones
    last). The space's centre, the search's first sampled trial, trains in the first: mixed precision buys speed, and
    under a time budget speed is samples trained."""
    speed = _speeds(precisions, "precision", model, probes)
    return sorted(precisions, key=lambda precision: -speed[precision])


def _fastest(kept: list[str], dimension: str, model: Any, probes: dict[str, ProbeResult]) -> str:
    speed = _speeds(kept, dimension, model, probes)
    return max(kept, key=lambda value: speed[value])


def _speeds(kept: list[str], dimension: str, model: Any, probes: dict[str, ProbeResult]) -> dict[str, float]:
    """Each value's best measured samples/s (on `model`, or on any model for None); 0 where none was measured."""
    return {value: max((r.samples_per_second for r in probes.values()
                        if getattr(r, dimension) == value and model in (None, r.model)), default=0.0)
            for value in kept}
