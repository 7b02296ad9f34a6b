"""How trials share the machine, when the sweep file leaves it open: GPUs used on purpose, not by accident.

Ray places a trial by the resources it asks for. A trial that asks for no GPU still sees every GPU of its node
and trains on GPU 0 with all the others, unaccounted for. So with CUDA present and resources.gpus_per_trial unset,
each trial asks for a share of a GPU: as many trials per GPU as the probe's peak memory lets fit with its margin
(plus each process's CUDA context, which the allocator's peak leaves out), whole GPUs round-robin when one trial
per GPU is all that fits or all that is wanted. search.max_concurrent_trials, unset, is then the trials that fit on
all GPUs, at most the CPU cores over cpus_per_trial. On a CPU the defaults stay 0 GPUs and one trial at a time.
"""

from __future__ import annotations

import math

from finesweep.search.probe.batch_search import SAFETY_MARGIN
from finesweep.search.probe.cores import usable_cores
from finesweep.search.probe.device import Device
from finesweep.search.probe.table import ProbeResult
from finesweep.spaces import SweepConfig, SweepFileError
from finesweep.spaces.config import ResourcesConfig

CUDA_CONTEXT_BYTES = 600 * 2**20  # a process's CUDA context and kernels, outside torch's allocator statistics


def peak_bytes(probes: dict[str, ProbeResult]) -> int:
    """The most memory a trial of the space needs: the highest peak, training at its micro-batch or evaluating."""
    peaks = [0]
    for result in probes.values():
        for attempt in result.attempts:
            mode = attempt.get("mode", "train")
            used = attempt["batch"] == (result.micro_batch if mode == "train" else 2 * result.max_micro_batch)
            if used and not attempt.get("out_of_memory") and not attempt.get("error"):
                peaks.append(int(attempt["peak_bytes"]))
    return max(peaks)


def trials_per_gpu(device: Device, peak: int) -> int:
    """Trials whose peak (with the probe's margin and a CUDA context each) fit in one GPU's memory together."""
    return max(1, int(device.total_memory // (peak * (1 + SAFETY_MARGIN) + CUDA_CONTEXT_BYTES)))


def fit_trial_cpus(config: SweepConfig, cores: int) -> tuple[SweepConfig, str]:
    """On a local Ray of `cores` CPUs (cores.usable_cores): resources.cpus_per_trial lowered where a trial's workers
    would ask for more, since Ray could place no trial (they would wait, pending, to the budget's end), and the words
    that say so (empty where it stands). A data-parallel trial with more workers than cores is refused."""
    resources = config.resources
    workers, asked = resources.workers_per_trial, resources.cpus_per_trial * resources.workers_per_trial
    if asked <= cores:
        return config, ""
    if workers > cores:
        raise SweepFileError(
            f"resources.workers_per_trial: {workers} data-parallel workers need a CPU core each at least, and this "
            f"sweep may use {cores} (this machine's, within its CPU affinity and cgroup quota). Set "
            f"resources.workers_per_trial to {cores} or fewer, or run the sweep on a Ray cluster (--address) whose "
            "nodes have the cores.")
    fitted = cores // workers
    note = (f"resources.cpus_per_trial {resources.cpus_per_trial:g} -> {fitted}: a trial would ask for {asked:g} CPU "
            f"cores and this sweep may use {cores} (this machine's, within its CPU affinity and cgroup quota), so a "
            f"local Ray could place no trial. Set resources.cpus_per_trial: {fitted} to say so in the file.")
    # The trial's resources, fitted to the cores before the probe times them: what a trial is, not how long it runs.
    return config.model_copy(update={"resources": resources.model_copy(update={"cpus_per_trial": float(fitted)})}), note


def core_slots(resources: ResourcesConfig, cores: int) -> int:
    """Trials whose CPU requests (cpus_per_trial per worker) fit in `cores` at once."""
    return max(1, int(cores // (resources.cpus_per_trial * resources.workers_per_trial)))


def gpu_slots(resources: ResourcesConfig, device: Device) -> int:
    """Trials whose GPU requests (gpus_per_trial per worker, set) fit in the device's GPUs at once."""
    return max(1, int(device.count // (resources.gpus_per_trial * resources.workers_per_trial)))


def share_devices(config: SweepConfig, device: Device, probes: dict[str, ProbeResult],
                  cpu_cores: int | None = None) -> tuple[SweepConfig, list[str]]:
    """The config with resources.gpus_per_trial and search.max_concurrent_trials set where the file left them
    open, and what was decided, in words."""
    resources, search = config.resources, config.search
    gpus, concurrent = resources.gpus_per_trial, search.max_concurrent_trials
    notes: list[str] = []
    if device.kind != "cuda" or gpus == 0:  # 0: the trials train on the CPU by request
        gpus, concurrent = gpus or 0, concurrent or 1
    elif gpus is None or concurrent is None:
        by_cores = core_slots(resources, cpu_cores or usable_cores())
        fit = trials_per_gpu(device, peak_bytes(probes)) if resources.workers_per_trial == 1 else 1
        if concurrent is None:
            # The file's share: the trials Ray can place with it; else as many as fit by the measured peak.
            by_gpus = gpu_slots(resources, device) if gpus else max(1, fit * device.count // resources.workers_per_trial)
            concurrent = min(by_gpus, by_cores)
            notes.append(f"{concurrent} trials at once: {by_gpus} fit on {device.count} GPU(s) (by the probe's "
                         f"peak memory or gpus_per_trial), {by_cores} by CPU cores (cpus_per_trial "
                         f"{resources.cpus_per_trial:g})")
        if gpus is None:
            sharing = min(fit, max(1, math.ceil(concurrent / device.count)))
            gpus = 1.0 if sharing == 1 else round(1 / sharing, 4)
            notes.append(f"gpus_per_trial {gpus:g}: " + ("a whole GPU per trial" if sharing == 1 else
                                                         f"{sharing} trials share each GPU"))
    # The devices' sharing the probe's memory allows, which the plan then times (PlanInputs.concurrency).
    resources = resources.model_copy(update={"gpus_per_trial": gpus})
    search = search.model_copy(update={"max_concurrent_trials": concurrent})
    return config.model_copy(update={"resources": resources, "search": search}), notes
