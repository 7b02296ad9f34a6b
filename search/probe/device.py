"""Resolve the training device once, honestly, and say which precisions it can train in."""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from finesweep.spaces import Precision, SweepFileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Device:
    """The device trials train on."""

    kind: str  # "cuda" or "cpu"
    name: str
    total_memory: int  # bytes of GPU memory (cuda) or of RAM (cpu)
    count: int = 1
    bf16: bool = True
    fp16: bool = False

    def supports(self, precision: str) -> tuple[bool, str]:
        """Whether trials can train in `precision` here, and if not, why."""
        if precision == Precision.fp16.value and not self.fp16:
            return False, "fp16 mixed precision needs a CUDA GPU"
        if precision == Precision.bf16.value and not self.bf16:
            return False, f"{self.name} has no bfloat16 support"
        return True, ""


def resolve_device(use_gpu: bool = True) -> Device:
    """CUDA when torch sees a GPU (and `use_gpu`: resources.gpus_per_trial is not 0), else the CPU."""
    import torch

    if use_gpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Device("cuda", props.name, props.total_memory, torch.cuda.device_count(),
                      bf16=torch.cuda.is_bf16_supported(), fp16=True)
    return Device("cpu", cpu_identity(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


SPEED_FLAG_PREFIXES = ("avx512", "amx")  # AVX-512 (and its bf16), AMX: what makes bf16 1.6x faster than fp32, or 7x slower
SPEED_FLAGS = ("avx2", "fma")


def cpu_identity(cpuinfo: str | None = None) -> str:
    """The CPU's model and the instruction sets that decide how fast it trains. The probe's cache is keyed by the
    device's name, so speeds measured on one kind of CPU are never taken for another's (machines of the same
    cloud type differ: one has AVX-512 bf16, the next only AVX2)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.is_file() else ""
    first_cpu = cpuinfo.split("\n\n", 1)[0]
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in first_cpu.splitlines() if ":" in line)}
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    fast = sorted(f for f in flags if f.startswith(SPEED_FLAG_PREFIXES) or f in SPEED_FLAGS)
    return f"{model} [{' '.join(fast) or 'no avx2'}]"


def usable_precisions(requested: list[str], device: Device) -> list[str]:
    """The requested precisions this device trains in; each one removed is logged with its reason."""
    usable = []
    for precision in requested:
        ok, reason = device.supports(precision)
        if ok:
            usable.append(precision)
        else:
            log.warning("precision %s removed from the space: %s", precision, reason)
    if not usable:
        reasons = "; ".join(f"{p}: {device.supports(p)[1]}" for p in requested)
        raise SweepFileError(
            f"space.precision: none of {requested} can train on this machine's {device.kind} ({device.name}): "
            f"{reasons}. Add fp32 to space.precision (it trains everywhere), or run the sweep on a machine that has "
            "what the precisions need.")
    return usable


def usable_methods(requested: list[str], device: Device) -> list[str]:
    """The requested training methods this machine can run; each one removed is logged with its reason. qlora trains
    LoRA on a 4-bit base through bitsandbytes, which does so on CUDA and on x86-64 CPUs (measured with 0.50)."""
    import importlib.util

    usable = []
    for method in requested:
        if method == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
            log.warning("method qlora removed from the space: it needs bitsandbytes (pip install bitsandbytes)")
            continue
        usable.append(method)
    if not usable:
        raise SweepFileError(
            f"space.method: none of {requested} can train on this machine's {device.kind} ({device.name}): qlora "
            "needs bitsandbytes. Install it (pip install bitsandbytes), or add lora or full to space.method.")
    return usable


def check_deepspeed(stage: int, device: Device) -> None:
    """resources.deepspeed_stage needs CUDA and the deepspeed package: said before any trial runs."""
    import importlib.util

    if not stage:
        return
    missing = [need for need, ok in (("a CUDA device (and resources.gpus_per_trial not 0)", device.kind == "cuda"),
                                     ("the deepspeed package (pip install deepspeed)",
                                      importlib.util.find_spec("deepspeed") is not None)) if not ok]
    if missing:
        raise SweepFileError(
            f"resources.deepspeed_stage: ZeRO stage {stage} needs {' and '.join(missing)}, but this machine "
            f"({device.name}) has not. Install what is missing, run the sweep where it is, or set "
            "resources.deepspeed_stage: 0.")


# How long busy_cores watches the machine, and how many of the probe's threads may lack a free core before its
# speeds are taken as measured under load (half a core: the driver's and Ray's own flickers stay below it).
BUSY_WINDOW_SECONDS = 0.25
CONTENTION_SLACK_CORES = 0.5


def busy_cores(window: float = BUSY_WINDOW_SECONDS, read_stat: Callable[[], list[int] | None] | None = None) -> float | None:
    """How many of the machine's cores are busy right now: the busy share of /proc/stat's CPU time over `window`
    seconds, times the cores it counts. None where there is no /proc/stat (not Linux)."""
    return other_work_cores(window, read_stat, read_own_ticks=lambda: 0)


def other_work_cores(window: float = BUSY_WINDOW_SECONDS, read_stat: Callable[[], list[int] | None] | None = None,
                     read_own_ticks: Callable[[], int | None] | None = None) -> float | None:
    """How many of the machine's cores work other than this process and its descendants keeps busy right now: the
    busy CPU time of /proc/stat over `window` seconds less what this process tree used in it (a local Ray's raylet
    and workers, the probe's worker: all started by this process), as cores. None where there is no /proc."""
    read_stat = read_stat or _proc_stat
    read_own_ticks = read_own_ticks or (lambda: tree_ticks(os.getpid()))
    first, own_first = read_stat(), read_own_ticks()
    time.sleep(window)
    second, own_second = read_stat(), read_own_ticks()
    if not first or not second or own_first is None or own_second is None:
        return None
    cores, times = second[0], [b - a for a, b in zip(first[1:], second[1:])]
    total, idle = sum(times), times[3] + times[4]  # idle and iowait
    other = total - idle - (own_second - own_first)
    return round(max(0.0, cores * other / total), 2) if total > 0 else 0.0


def tree_ticks(root: int, proc: Path = Path("/proc")) -> int | None:
    """The CPU time, in clock ticks (/proc/stat's unit), of process `root` and its live descendants: each one's user
    and system time and that of the children it has waited for (so a descendant that ended still counts). None
    where `root` has no /proc entry."""
    parents, ticks = {}, {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # After the command's name (which may hold spaces and parentheses): state, ppid, ..., utime at 11,
            # stime, cutime, cstime (proc(5)).
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the process ended between the listing and the read
        pid = int(entry.name)
        parents[pid], ticks[pid] = int(fields[1]), sum(map(int, fields[11:15]))
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks[pid]
        todo.extend(children.get(pid, []))
    return total


# How long the search's start watches the machine for other work (longer than the probe's look: said once a sweep),
# and Ray's variable for its workers' niceness (ray_constants.RAY_WORKER_NICENESS; 15 when unset).
OTHER_WORK_WINDOW_SECONDS = 0.5
RAY_WORKER_NICENESS = "RAY_worker_niceness"


def warn_of_other_work() -> float | None:
    """The cores other work keeps busy as a local Ray's CPU trials start (other_work_cores; None without /proc),
    warned about where the trials' threads would lack free cores (other_work_warning)."""
    busy = other_work_cores(OTHER_WORK_WINDOW_SECONDS)
    if warning := other_work_warning(busy, os.cpu_count() or 1, os.environ.get(RAY_WORKER_NICENESS)):
        log.warning(warning)
    return busy


def other_work_warning(busy: float | None, cores: int, niceness: str | None) -> str:
    """What a search that starts beside other CPU work is told (empty where the trials' threads find their cores
    free). Ray runs its workers at niceness 15 unless RAY_worker_niceness (`niceness`) says otherwise: the trials then
    get only the cores other work leaves, and the plan's seconds, priced from speeds the probe measured at its own
    priority (or cached from a quieter machine), buy fewer steps."""
    if not contended(busy, threads=cores, cores=cores):
        return ""
    try:
        equal_terms = niceness is not None and int(niceness) <= 0
    except ValueError:
        equal_terms = False
    share = (f"The trials share those cores with it (RAY_worker_niceness={niceness})" if equal_terms else
             "Ray runs trials at a low priority (niceness 15 unless RAY_worker_niceness says otherwise), so they get "
             "only what the other work leaves")
    fix = "" if equal_terms else ", or start the sweep with RAY_worker_niceness=0 to share the cores on equal terms"
    return (f"search: other work keeps {busy:.1f} of this machine's {cores} CPU cores busy as the trials start "
            f"(processes this sweep did not start). {share}: they will train fewer steps than the plan counted, "
            f"and a time budget buys less. Stop the other work{fix}.")


def contended(busy: float | None, threads: int, cores: int | None = None) -> bool:
    """Whether `threads` more busy threads (the probe's) would lack a free core with `busy` cores already taken."""
    cores = cores or os.cpu_count() or 1
    return busy is not None and busy + threads > cores + CONTENTION_SLACK_CORES


def _proc_stat() -> list[int] | None:
    """[number of cores, then the aggregate line's user, nice, system, idle, iowait, ... jiffies] of /proc/stat."""
    path = Path("/proc/stat")
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return [cores, *map(int, lines[0].split()[1:])]
