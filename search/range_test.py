"""The learning-rate range test before the search (trainer/lr_range.py runs one): which of the space's ranges are
tested, each test in a fresh process with its answer cached in the sweep folder, and the narrower range each answer
gives the sampler.

Reading a test (Smith 2017, section 3.3): the rate where the loss stops falling is the highest worth
sampling, and the decade below it holds the rates that learn without diverging. A loss that never fell before it
rose narrows to the decade that ends at a tenth of the rate where it rose (fastai's rule: a tenth of the rate at
which the loss climbs). A loss that did neither tells nothing, and the range stays the user's."""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from finesweep.search.budget.range_test import RANGE_TEST_STEPS, affordable, range_test_seconds
from finesweep.search.outputs.logs import sweep_log_file
from finesweep.search.probe.table import combination_key
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import centre_point
from finesweep.spaces.space_config import FloatRange
from finesweep.spaces.files import write_json_atomic
from finesweep.trainer.lr_range import RECORDED, RangeStep, range_test_in_process
from finesweep.trainer.trial import TrialPlan, plan_batches

DECADE = 10.0
SMOOTHING = 0.6  # the loss's exponential average over about 3 steps: a step's own wobble is not a turn
MIN_DROP = 0.02  # the smoothed loss fell: its lowest is at least 2% under its first
RISE = 0.1  # the smoothed loss rose: 10% over its lowest so far
CACHE_FILE = "lr-range.json"


@dataclass(frozen=True)
class Narrowing:
    """One test's answer: the model and method tested, the range it read and the range the sampler draws from."""

    model: str
    method: str
    low: float
    high: float
    new_low: float
    new_high: float
    reading: str  # what the loss did, in words
    seconds: float = 0.0
    reused: bool = False  # read from the sweep folder's cache

    @property
    def narrowed(self) -> bool:
        return (self.new_low, self.new_high) != (self.low, self.high)

    def words(self) -> str:
        outcome = (f"{self.low:.2g}..{self.high:.2g} -> {self.new_low:.2g}..{self.new_high:.2g}" if self.narrowed
                   else f"{self.low:.2g}..{self.high:.2g} kept")
        source = "cached" if self.reused else f"{self.seconds:.0f} s"
        return f"learning-rate range test, {self.model} {self.method} ({source}): {outcome}: {self.reading}"


def smoothed(losses: list[float]) -> list[float]:
    """The losses' exponential moving average, bias-corrected (so its first value is the first loss)."""
    average, out = 0.0, []
    for index, loss in enumerate(losses, start=1):
        average = SMOOTHING * average + (1 - SMOOTHING) * loss
        out.append(average / (1 - SMOOTHING ** index))
    return out


def read_test(steps: list[RangeStep], low: float, high: float) -> tuple[float, float, str]:
    """The range the sampler draws from after a test over low..high, inside it, and what the loss did."""
    finite = [s for s in steps if math.isfinite(s.loss)]
    diverged_at = next((s.learning_rate for s in steps if not math.isfinite(s.loss)), None)
    if len(finite) < 3:
        return low, high, "too few steps trained to read"
    loss = smoothed([s.loss for s in finite])
    lowest = min(range(len(loss)), key=loss.__getitem__)
    rose = next((finite[i].learning_rate for i in range(lowest, len(loss)) if loss[i] > (1 + RISE) * loss[lowest]),
                diverged_at)
    if loss[lowest] <= (1 - MIN_DROP) * loss[0]:
        top = finite[lowest].learning_rate
        reading = (f"the held-out batch's loss fell to {loss[lowest]:.3g} (from {loss[0]:.3g}) by rate {top:.2g}"
                   + (f" and rose past it (by {rose:.2g})" if rose else ", still falling at the range's top"))
        return _decade_under(top, low, high) + (reading,)
    if rose:
        reading = (f"the held-out batch's loss did not fall before it rose at rate {rose:.2g}: the decade that ends "
                   "at a tenth of it")
        return _decade_under(rose / DECADE, low, high) + (reading,)
    return low, high, "the held-out batch's loss neither fell nor rose over the range: the test tells nothing"


def _decade_under(top: float, low: float, high: float) -> tuple[float, float]:
    """The decade that ends at `top`, inside low..high (at least the range's lowest stretch when `top` is under it)."""
    new_high = min(max(top, low * math.sqrt(DECADE)), high)
    return max(new_high / DECADE, low), new_high


def wide_ranges(config: SweepConfig) -> dict[str, FloatRange]:
    """Per method, its learning-rate range where it spans more than a decade (the ranges the test may narrow)."""
    ranges = {m.value: config.space.float_dimension("learning_rate", m) for m in config.space.method}
    return {method: dim for method, dim in ranges.items()
            if isinstance(dim, FloatRange) and dim.high > DECADE * dim.low}


def learning_rates(narrowings: list[Narrowing]) -> dict[str, list[float]]:
    """Per method, the range its trials sample: what the tests of every model narrowed it to together (their span:
    a rate one model learns at is never cut from another's range)."""
    by_method: dict[str, list[float]] = {}
    for n in narrowings:
        if n.method in by_method:
            low, high = by_method[n.method]
            by_method[n.method] = [min(low, n.new_low), max(high, n.new_high)]
        else:
            by_method[n.method] = [n.new_low, n.new_high]
    original = {n.method: [n.low, n.high] for n in narrowings}
    return {method: span for method, span in by_method.items() if span != original[method]}


@dataclass(frozen=True)
class RangeTestInputs:
    """What the tests read of a measured sweep (search/measure.py)."""

    config: SweepConfig
    tokenized: dict[str, str]  # model name -> tokenized splits folder
    label_names: list[str] | None
    probes: dict[str, Any]  # combination_key -> ProbeResult, the space's kept combinations
    precision: str  # the fastest kept: the tests train in it
    cache_dir: Path
    threads: int  # the CPU cores the sweep may use: a test runs alone


def narrow_learning_rates(inputs: RangeTestInputs, console) -> list[Narrowing]:
    """Every (model, method) whose range is wide tested, where search.lr_range_test lets it; a test whose answer
    the sweep folder's cache holds is read, not run again."""
    ranges = wide_ranges(inputs.config)
    plans = {(model, method): _test_plan(inputs, model, method)
             for method in ranges for model in inputs.config.model_names}
    plans = {pair: plan for pair, plan in plans.items() if plan is not None}
    if not plans:
        return []
    cached = _read_cache(inputs.cache_dir)
    keys = {pair: _cache_key(plan, *_ends(ranges[pair[1]])) for pair, plan in plans.items()}
    predicted = sum(_predicted(inputs, plan) for pair, plan in plans.items() if keys[pair] not in cached)
    runs, why = affordable(inputs.config, predicted)
    if not runs and predicted:
        console.step(f"Learning-rate range test skipped ({why}): the trials sample the space's ranges")
        return []
    with _TestProcess() as process:
        return [_narrowing(model, method, plan, _ends(ranges[method]), keys[(model, method)], cached, process,
                           inputs.cache_dir, console) for (model, method), plan in plans.items()]


def _narrowing(model: str, method: str, plan: TrialPlan, ends: tuple[float, float], key: str,
               cached: dict[str, Any], process: "_TestProcess", cache_dir: Path, console) -> Narrowing:
    """One (model, method)'s answer: the cache's, or its test run now (and cached where it trained)."""
    low, high = ends
    steps, seconds = cached.get(key), 0.0
    if steps is None:
        console.step(f"Learning-rate range test: {model} {method}, rates {low:.2g} to {high:.2g} over "
                     f"{RANGE_TEST_STEPS} steps (the plan says what it read)")
        started = time.perf_counter()
        steps = process.run(plan, low, high)
        seconds = time.perf_counter() - started
        if not isinstance(steps, str):
            cached[key] = steps
            _write_cache(cache_dir, cached)
    new_low, new_high, reading = (
        (low, high, f"the test failed ({steps}; see the sweep's log)") if isinstance(steps, str)
        else read_test([RangeStep(**s) for s in steps], low, high))
    return Narrowing(model, method, low, high, new_low, new_high, reading, seconds, reused=not seconds)


def _ends(dim: FloatRange) -> tuple[float, float]:
    return dim.low, dim.high


def _test_plan(inputs: RangeTestInputs, model: str, method: str) -> TrialPlan | None:
    """The test's run: the space's centre for the method (its batch, first LoRA rank) on `model` in the fastest
    precision, with the probe's micro-batch; None where the probe found none that fits."""
    config = inputs.config
    probe = inputs.probes.get(combination_key(model, inputs.precision, method))
    if probe is None or probe.micro_batch < 1:
        return None
    centre = centre_point(config.space, [model], [inputs.precision])
    rank = config.space.lora_r[0]
    alpha = config.space.derived_lora_alpha(rank).get("lora_alpha", rank * 2)
    return TrialPlan(
        candidate=config.candidate(model).model_dump(), task=config.data.task.value, label_names=inputs.label_names,
        tokenized_dir=inputs.tokenized[model], output_dir=str(inputs.cache_dir / "lr-range-run"),
        precision=inputs.precision, method=method, learning_rate=0.0,
        weight_decay=_fixed(centre, config, "weight_decay"),
        warmup_ratio=0.0, batch=plan_batches(centre["effective_batch_size"], probe.micro_batch),
        eval_batch=probe.micro_batch, max_steps=RANGE_TEST_STEPS, eval_every_steps=RANGE_TEST_STEPS,
        seed=config.seed, threads=inputs.threads, trust_remote_code=config.trust_remote_code,
        lora_r=rank, lora_alpha=alpha, lora_dropout=config.space.lora_dropout,
        freeze_embeddings=config.space.freezes_embeddings(config.data.task, method),
        gradient_checkpointing=probe.gradient_checkpointing, use_gpu=config.resources.gpus_per_trial != 0,
        group_by_length=config.data.group_by_length, text_pairs=config.data.text_pair_column is not None)


def _fixed(centre: dict[str, Any], config: SweepConfig, name: str) -> float:
    """A continuous dimension's value for the test: the space's centre where it is searched, else its fixed value."""
    value = centre.get(name, config.space.float_dimension(name))
    return float(value) if isinstance(value, (int, float)) else 0.0


def _predicted(inputs: RangeTestInputs, plan: TrialPlan) -> float:
    probe = inputs.probes[combination_key(plan.candidate["name"], plan.precision, plan.method)]
    return range_test_seconds(probe.samples_per_second, plan.batch.effective, plan.batch.micro, probe.load_seconds)


class _TestProcess:
    """The tests' process, started at the first test that runs (none where every answer is cached) and shared by
    the rest, so its imports are paid once: the trials' memory and threads, none of the controller's, its libraries'
    output to the sweep's log."""

    def __init__(self):
        self._pool = None

    def __enter__(self) -> "_TestProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()

    def run(self, plan: TrialPlan, low: float, high: float) -> list[dict[str, float]] | str:
        """One test's steps, or a failure's message (the range then stays the user's)."""
        log_file = sweep_log_file()
        try:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(1)
            return self._pool.apply(range_test_in_process, (plan, low, high, str(log_file) if log_file else None))
        except Exception as error:  # a test that fails costs its range nothing: the trials sample the user's
            return f"{type(error).__name__}: {error}"


def _cache_key(plan: TrialPlan, low: float, high: float) -> str:
    """What a test's answer depends on: its run (model, data folder, method, precision, batch, seed, steps), its range
    and what it records."""
    recipe = asdict(replace(plan, output_dir="", threads=0))
    text = json.dumps([recipe, low, high, RECORDED], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read_cache(cache_dir: Path) -> dict[str, list[dict[str, float]]]:
    path = cache_dir / CACHE_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}  # unreadable: tested again, and written anew


def _write_cache(cache_dir: Path, cached: dict[str, list[dict[str, float]]]) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(cache_dir / CACHE_FILE, cached)
