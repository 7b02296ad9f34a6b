"""The CPU cores this process may use, and how busy other work keeps them: what the plan counts trials and threads
by, what a local Ray is given, and what the probe and the search's start warn about. Linux's /proc and cgroup files;
elsewhere the machine's count and no load measured."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")

# How long busy_cores watches the machine, and how many of the probe's threads may lack a free core before its
# speeds are taken as measured under load (half a core: the driver's and Ray's own flickers stay below it).
BUSY_WINDOW_SECONDS = 0.25
CONTENTION_SLACK_CORES = 0.5
# How long the search's start watches the machine for other work (longer than the probe's look: said once a sweep),
# and Ray's variable for its workers' niceness (ray_constants.RAY_WORKER_NICENESS; 15 when unset).
OTHER_WORK_WINDOW_SECONDS = 0.5
RAY_WORKER_NICENESS = "RAY_worker_niceness"


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity mask (a Slurm job's cores, `taskset`, a container's cpuset),
    where the system has one; else every CPU of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def usable_cores(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> int:
    """The cores this process's work can keep busy: its allowed CPUs, capped by a cgroup CPU quota (a container's
    --cpus, a Kubernetes limit) rounded down as Ray rounds it, at least 1. os.cpu_count() counts the whole machine's
    CPUs: a job given 8 cores of 128 would plan 128 single-core trial slots by it."""
    cores = len(allowed_cpus())
    quota = cgroup_cpu_quota(proc, cgroup_root)
    return max(1, min(cores, math.floor(quota))) if quota is not None else cores


def cap_torch_threads() -> int:
    """Cap this process's torch threads at usable_cores (and return them): torch starts up to one per CPU its
    affinity allows, so under a cgroup quota of fewer cores the extra threads queue for the quota's time; the
    export's ONNX Runtime and llama.cpp sessions take torch's count."""
    import torch

    threads = min(torch.get_num_threads(), usable_cores())
    torch.set_num_threads(threads)
    return threads


def cgroup_cpu_quota(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota, in cores, of this process's cgroup and its ancestors: cgroup v2's cpu.max ("max" or
    "QUOTA PERIOD"), v1's cpu.cfs_quota_us over cpu.cfs_period_us (-1: none). None where no quota is set or there are
    no cgroup files."""
    try:
        memberships = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in memberships:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]  # hierarchy-ID:controllers:path (cgroups(7))
        if controllers == "":  # cgroup v2's unified hierarchy
            quotas += [_v2_quota(folder) for folder in _up_to_root(cgroup_root, path)]
        elif "cpu" in controllers.split(","):
            mount = cgroup_root / controllers
            quotas += [_v1_quota(folder) for folder in _up_to_root(mount if mount.is_dir() else cgroup_root / "cpu",
                                                                    path)]
    quotas = [quota for quota in quotas if quota is not None]
    return min(quotas) if quotas else None


def _up_to_root(root: Path, path: str) -> list[Path]:
    """The cgroup folder `path` under `root` and each of its parents up to `root` (in a container, the process's
    path may not exist under its mount: then `root` alone, the container's own cgroup)."""
    folder = root / path.strip("/")
    return [folder, *[parent for parent in folder.parents if parent.is_relative_to(root)]]


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return int(quota) / int(period) if quota.isdigit() and period.isdigit() and int(period) > 0 else None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def busy_cores(window: float = BUSY_WINDOW_SECONDS,
               read_stat: Callable[[], list[int] | None] | None = None) -> float | None:
    """How many of this process's allowed CPUs are busy right now: the busy share of their /proc/stat time over
    `window` seconds, times their number. None where there is no /proc/stat (not Linux)."""
    return other_work_cores(window, read_stat, read_own_ticks=lambda: 0)


def other_work_cores(window: float = BUSY_WINDOW_SECONDS, read_stat: Callable[[], list[int] | None] | None = None,
                     read_own_ticks: Callable[[], int | None] | None = None) -> float | None:
    """How many of this process's allowed CPUs work other than this process and its descendants keeps busy right
    now: their busy /proc/stat time over `window` seconds less what this process tree used in it (a local Ray's
    raylet and workers, the probe's worker: all started by this process), as cores. None where there is no /proc."""
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


def tree_ticks(root: int, proc: Path = PROC) -> int | None:
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


def warn_of_other_work() -> float | None:
    """The cores other work keeps busy as a local Ray's CPU trials start (other_work_cores; None without /proc),
    warned about where the trials' threads would lack free cores (other_work_warning)."""
    busy = other_work_cores(OTHER_WORK_WINDOW_SECONDS)
    if warning := other_work_warning(busy, len(allowed_cpus()), usable_cores(), os.environ.get(RAY_WORKER_NICENESS)):
        log.warning(warning)
    return busy


def other_work_warning(busy: float | None, cores: int, threads: int, niceness: str | None) -> str:
    """What a search that starts beside other CPU work is told (empty where the trials' `threads` find free cores
    among the `cores` this process may run on). Ray runs its workers at niceness 15 unless RAY_worker_niceness
    (`niceness`) says otherwise: the trials then get only the cores other work leaves, and the plan's seconds, priced
    from speeds the probe measured at its own priority (or cached from a quieter machine), buy fewer steps."""
    if not contended(busy, threads=threads, cores=cores):
        return ""
    try:
        equal_terms = niceness is not None and int(niceness) <= 0
    except ValueError:
        equal_terms = False
    share = (f"The trials share those cores with it (RAY_worker_niceness={niceness})" if equal_terms else
             "Ray runs trials at a low priority (niceness 15 unless RAY_worker_niceness says otherwise), so they get "
             "only what the other work leaves")
    fix = "" if equal_terms else ", or start the sweep with RAY_worker_niceness=0 to share the cores on equal terms"
    return (f"search: other work keeps {busy:.1f} of the {cores} CPU cores this sweep may use busy as the trials "
            f"start (processes this sweep did not start). {share}: they will train fewer steps than the plan counted, "
            f"and a time budget buys less. Stop the other work{fix}.")


def contended(busy: float | None, threads: int, cores: int | None = None) -> bool:
    """Whether `threads` more busy threads (the probe's) would lack a free core among `cores` (this process's allowed
    CPUs) with `busy` of them already taken."""
    cores = cores or len(allowed_cpus())
    return busy is not None and busy + threads > cores + CONTENTION_SLACK_CORES


def _proc_stat(path: Path = PROC / "stat", allowed: set[int] | None = None) -> list[int] | None:
    """[number of CPUs, then their summed user, nice, system, idle, iowait, ... jiffies] of /proc/stat, over the CPUs
    this process may run on (`allowed`; by default its affinity): other CPUs' work does not slow its threads."""
    if not path.is_file():
        return None
    allowed = allowed_cpus() if allowed is None else allowed
    rows = [line.split() for line in path.read_text().splitlines() if line.startswith("cpu") and line[3:4].isdigit()]
    counted = [list(map(int, row[1:])) for row in rows if int(row[0][3:]) in allowed]
    if not counted:
        return None
    return [len(counted), *(sum(column) for column in zip(*counted))]
