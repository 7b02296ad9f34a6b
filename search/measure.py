"""A sweep's inputs measured and turned into the search's settings, between the data and the first trial: the memory
probe, the space steered by the probe's speeds, the models that fit nowhere dropped, the devices shared, and the
trials planned against the budget. `finesweep run` and `finesweep plan` both go through here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from finesweep.search.budget.export_calibration import calibration_key, ratios as export_ratios
from finesweep.search.budget.limit import probe_seconds, within_limit
from finesweep.search.budget.plan import SearchPlan, one_trial_warning, plan_inputs, search_plan, unplanned
from finesweep.search.inputs import (PreparedSweep, SweepFolder, dequantize_gguf, prepare_data, read_data,
                                     tokenizer_candidates)
from finesweep.search.outputs.console import Console
from finesweep.search.outputs.logs import log_to_file
from finesweep.search.outputs.variants import check_backends
from finesweep.search.probe import sharing
from finesweep.search.probe.cores import usable_cores
from finesweep.search.probe.device import Device, check_deepspeed, resolve_device, usable_methods, usable_precisions
from finesweep.search.probe.sharing import core_slots, gpu_slots
from finesweep.search.probe.steer import (dominated_precisions, fastest_first, slow_values, stand_ins,
                                          unmeasured_precisions, without)
from finesweep.search.probe.answers import machine_probe_file
from finesweep.search.probe.table import ProbeResult, probe_all, probe_worker
from finesweep.search.probe.worker import ProbeWorker
from finesweep.search.range_test import Narrowing, RangeTestInputs, learning_rates, narrow_learning_rates
from finesweep.spaces import Method, SweepConfig, SweepFileError
from finesweep.spaces.grid import grid_configurations
from finesweep.trainer.gguf import check_gguf
from finesweep.trainer.models import check_pooling


def measure_memory(config: SweepConfig, folder: SweepFolder, device: Device, precisions: list[str],
                   data: PreparedSweep, console: Console, worker: ProbeWorker | None = None) -> dict[str, Any]:
    """The memory probe over the space's models, precisions and methods (cached by content), printed; under a time
    limit within its share of it (search/budget/limit.py probe_seconds). `worker`: the probe process, begun earlier."""
    console.step("Probing memory: largest micro-batch per model, precision and method")
    labels = len(data.prepared.label_names or []) or 2
    cache = machine_probe_file()
    limit = config.search.time_limit_seconds
    results = probe_all(config, device, precisions, data.max_seq_len, labels, cache, folder.probe_file,
                        probe_seconds(limit), worker)
    console.probe_table(results)
    if reused := sum(r.reused for r in results.values()):
        console.step(f"Probe: {reused} of {len(results)} combinations measured by an earlier sweep on this machine, "
                     f"read from {cache} (delete it to measure again)")
    return results


def recorded_answers(recorded: dict[str, dict[str, Any]], console: Console) -> dict[str, ProbeResult]:
    """The probe's answers a sweep started with, for its resume: its trials go on with the micro-batches and plans
    they began with (MLflow refuses a run's parameter changed, and a checkpoint's optimizer steps assume them). The
    machine's cache is no such record: a combination first measured under load is measured again on a quieter
    machine, and its fastest micro-batch may differ."""
    results = {key: ProbeResult(**entry) for key, entry in recorded.items()}
    console.probe_table(results)
    console.step("Probe: the answers this sweep started with, read from sweep-state.json (a resume keeps them)")
    return results


@dataclass
class PhaseClock:
    """Wall time of the whole command and of each phase of it (data, probe, search, export), for summary.json and
    the parent run: the sweep's time is what the user waited, not the search's alone."""

    started: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=dict)
    _mark: float = field(default_factory=time.perf_counter)

    def lap(self, phase: str) -> None:
        """The time since the last lap (or the start) was spent in `phase`."""
        now = time.perf_counter()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - self._mark, 1)
        self._mark = now

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self.started, 1)


def process_started() -> float:
    """When this process started, on time.time()'s clock: a user's stopwatch starts there, so Python's start and the
    imports before a command's first line count against --time-limit too (0.4 to 0.6 s on 2 cores, AVX2; the exit,
    after the clock's last reading, is search/budget/measured.py's EXIT_SECONDS). Linux's /proc/self/stat; elsewhere
    the time of the call."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks_after_boot = int(after_name[19])  # field 22, starttime; the split begins at field 3
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - max(uptime - ticks_after_boot / os.sysconf("SC_CLK_TCK"), 0.0)


@dataclass
class Measured:
    """A sweep's inputs ready and measured: the data prepared, the probe's answers, the space they leave."""

    config: SweepConfig
    folder: SweepFolder
    data: PreparedSweep
    probes: dict[str, Any]
    precisions: list[str]
    console: Console
    device: Device
    clock: PhaseClock
    narrowings: list[Narrowing] = field(default_factory=list)  # the learning-rate range tests' answers


def measure_inputs(config: SweepConfig, folder: SweepFolder, console: Console, started: float | None = None,
                   recorded_probes: dict[str, dict[str, Any]] | None = None, address: str | None = None) -> Measured:
    """The checks that need no data, the data prepared and the probe run (both cached by content), the space
    steered by the probe's speeds. `started`: when the process started (time.time()'s clock); the clock's total counts
    from it (search.time_limit bounds the whole command). `recorded_probes`: the answers a resumed sweep started with
    (sweep-state.json), used instead of the probe (see recorded_answers). `address`: the Ray cluster the trials will
    run on (None: a local Ray, whose CPUs bound a trial's)."""
    clock = PhaseClock(started=time.perf_counter() - (time.time() - started)) if started else PhaseClock()
    check_backends(config)
    check_gguf(config)
    device = resolve_device(use_gpu=config.resources.gpus_per_trial != 0)
    check_deepspeed(config.resources.deepspeed_stage, device)
    cpus_note = ""
    if address is None:  # before the probe, which times a trial's threads
        config, cpus_note = sharing.fit_trial_cpus(config, usable_cores())
    for candidate in config.models:  # after the checks of the file alone: this one reads the models' configs
        check_pooling(candidate, config.trust_remote_code)
    folder.root.mkdir(parents=True, exist_ok=True)
    log_to_file(folder.log_file)  # after the checks (a file refused before anything runs leaves no folder), before
    # the data, the GGUF candidates and the probe, whose libraries' warnings go there (the probe process's too)
    precisions = usable_precisions([p.value for p in config.space.precision], device)
    methods = usable_methods([m.value for m in config.space.method], device)
    if len(methods) < len(config.space.method):  # the space this device can train, not a division of time
        config = config.model_copy(update={"space": config.space.model_copy(update={"method": [Method(m) for m in methods]})})
    console.header(config, device, folder.root)
    if cpus_note:
        console.warn(cpus_note)
    # The probe's process imports torch on the other core while the data is read: 5 s of every first sweep.
    worker = probe_worker(config, device)
    if recorded_probes is None:
        worker.begin()
    try:
        # Data, tokens and lengths before a GGUF candidate's minute of dequantizing: their errors come first.
        data = prepare_data(tokenizer_candidates(config), folder, console, read_data(config, folder))
        config = dequantize_gguf(config, console)
        clock.lap("data")
        probes = (measure_memory(config, folder, device, precisions, data, console, worker)
                  if recorded_probes is None else recorded_answers(recorded_probes, console))
    finally:
        worker.close()
    config, precisions, probes = steer_by_speed(config, precisions, probes, console)
    config = drop_unfit_models(config, probes, console)
    config = share_devices(config, device, kept_probes(config, precisions, probes), console)
    narrowings = [] if recorded_probes is not None else narrow_learning_rates(
        RangeTestInputs(config, data.tokenized, data.prepared.label_names, kept_probes(config, precisions, probes),
                        precisions[0], folder.cache, usable_cores()), console)
    clock.lap("probe")  # the range tests are the probe's phase: what the sweep measured before it searched
    return Measured(config, folder, data, probes, precisions, console, device, clock, narrowings)


def steer_by_speed(config: SweepConfig, precisions: list[str], probes: dict[str, Any],
                   console: Console) -> tuple[SweepConfig, list[str], dict[str, Any]]:
    """Precisions and methods far slower than the alternatives on this machine leave the space
    (search.min_relative_speed), and so does a reduced precision slower than fp32 or left unmeasured by the probe's
    share of a time limit for every combination (where it was measured for some, fp32's answers stand in for the
    rest: see stand_ins). The precisions kept come fastest first (on the first model listed): see fastest_first.
    Returns the config, the precisions and the answers the trials take (the stand-ins among them)."""
    probes, notes = stand_ins(probes)
    for note in notes:
        console.step(note)
    measured = {key: result for key, result in probes.items() if result.own_speed}
    removals = unmeasured_precisions(probes)
    for removal in slow_values(measured, config.search.min_relative_speed) + dominated_precisions(measured):
        if (removal.dimension, removal.value) not in {(kept.dimension, kept.value) for kept in removals}:
            removals.append(removal)
    for removal in removals:
        console.warn(f"{removal.dimension} {removal.value} removed from the space: {removal.reason}")
    if removals:
        config, precisions, warnings = without(config, precisions, removals, measured)
        for warning in warnings:
            console.warn(warning)
    return config, fastest_first(precisions, config.model_names[0], measured), probes


def _export_thread_ratio(config: SweepConfig, device: Device) -> float:
    """On a CPU, the export's threads (every core) over the threads of a trial, whose evaluation the probe timed."""
    if device.kind != "cpu":
        return 1.0
    return usable_cores() / config.resources.cpus_per_trial


def plan_trials(inputs: Measured, address: str | None) -> SearchPlan:
    """The search's plan from the probe's speeds and the budget (search/budget/plan.py), printed with the predicted
    end: what finesweep decided beside the sweep file, which stays as written. Under search.time_limit the search
    gets what the command's time so far and the export's estimate leave of it (search/budget/limit.py)."""
    config, elapsed = inputs.config, inputs.clock.total
    splits = inputs.data.prepared.report.splits
    device = inputs.device
    # The export runs in this process, with every core.
    key = calibration_key(config, [device.kind, device.name, device.total_memory], usable_cores())
    calibration = {"key": key, "ratios": export_ratios(key)}
    grid_size = grid_configurations(config, inputs.precisions) if config.search.algorithm == "grid" else None
    concurrency = trial_slots(config, device, address)
    measured = plan_inputs(
        config, kept_probes(config, inputs.precisions, inputs.probes), validation_rows=splits.get("validation", 0),
        test_rows=splits.get("test", 0), seq_len=inputs.data.max_seq_len, concurrency=concurrency,
        lengths=inputs.data.lengths, train_rows=splits.get("train", 0), cuda=_cuda_present(),
        export_thread_ratio=_export_thread_ratio(config, device), export_calibration=calibration,
        elapsed_seconds=elapsed, grid_size=grid_size)
    if measured is None:
        return with_narrowed_rates(unplanned(config, concurrency, elapsed, grid_size), inputs.narrowings)
    limit = config.search.time_limit_seconds
    plan = search_plan(config, measured, within_limit(config, measured, limit, elapsed) if limit else None)
    plan = with_narrowed_rates(plan, inputs.narrowings)
    inputs.console.plan(plan, elapsed)
    if warning := one_trial_warning(config, measured, plan):
        inputs.console.warn(warning)
    return plan


def with_narrowed_rates(plan: SearchPlan, narrowings: list[Narrowing]) -> SearchPlan:
    """The plan with the learning-rate ranges the range tests narrowed, and a note per test of what it read."""
    if not narrowings:
        return plan
    return replace(plan, learning_rates=learning_rates(narrowings),
                   notes=[*plan.notes, *(n.words() for n in narrowings)])


def _cuda_present() -> bool:
    """Whether the export will time its variants on a GPU and then on the CPU (search/outputs/export.py)."""
    import torch

    return torch.cuda.is_available()


def trial_slots(config: SweepConfig, device: Device, address: str | None) -> int:
    """Trials that can run at once: max_concurrent_trials, capped on a local Ray by the CPU cores this sweep may use
    (and the GPUs) per trial's request; a cluster's size is Ray's to know, so there the sweep file's number."""
    resources = config.resources
    wanted = min(config.search.max_concurrent_trials or 1, config.search.num_trials)
    if address is not None:
        return wanted
    slots = core_slots(resources, usable_cores())
    if resources.gpus_per_trial and device.kind == "cuda":
        slots = min(slots, gpu_slots(resources, device))
    return min(wanted, slots)


def kept_probes(config: SweepConfig, precisions: list[str], probes: dict[str, Any]) -> dict[str, Any]:
    """The probe's answers for the combinations the space still holds (after steering and unfit models)."""
    methods = {m.value for m in config.space.method}
    return {key: result for key, result in probes.items()
            if result.model in config.model_names and result.precision in precisions and result.method in methods}


def share_devices(config: SweepConfig, device: Device, probes: dict[str, Any], console: Console) -> SweepConfig:
    """GPUs per trial and trials at once, where the sweep file leaves them open (search/probe/sharing.py)."""
    config, notes = sharing.share_devices(config, device, probes)
    for note in notes:
        console.step(note)
    return config


def drop_unfit_models(config: SweepConfig, probes: dict[str, Any], console: Console) -> SweepConfig:
    """Candidates of which not even a micro-batch of 1 fits in any precision leave the space, with the reason:
    their trials could only fail. A candidate that fits in some precisions stays; a trial sampled in one that
    does not is recorded as out of memory."""
    fits = {name: any(r.micro_batch > 0 for r in probes.values() if r.model == name) for name in config.model_names}
    for name in (n for n, ok in fits.items() if not ok):
        console.warn(f"model {name} removed from the space: not even a micro-batch of 1 fits the memory budget")
    kept = [name for name, ok in fits.items() if ok]
    if not kept:
        raise SweepFileError(
            f"resources.memory_budget: no candidate model fits ({', '.join(fits)}): the memory probe found no "
            "micro-batch that trains within the budget. Raise resources.memory_budget, use LoRA (space.method), "
            "a shorter data.max_seq_len, or a smaller model.")
    if len(kept) == len(fits):
        return config
    # The space this machine's memory allows, not a division of time.
    return config.model_copy(update={"space": config.space.model_copy(update={"model": kept})})
