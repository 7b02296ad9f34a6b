"""The CPU cores a sweep may use (affinity, cgroup quota), and the other work that keeps them busy, leaving out the
sweep's own processes."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys

import pytest

from finesweep.search.probe import cores
from finesweep.search.probe.cores import (_proc_stat, cap_torch_threads, cgroup_cpu_quota, contended, other_work_cores,
                                          other_work_warning, tree_ticks, usable_cores, warn_of_other_work)
from finesweep.search.tracking.tags import END_STATE_TAG
from tests import tiny
from tests.sweeps import one_model_sweep, store, trial_runs


def _files(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_cgroup_v2_quota_of_an_ancestor_caps_the_cores_of_a_job_allowed_sixteen(tmp_path, monkeypatch):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    _files(proc, {"self/cgroup": "0::/job/step\n"})
    _files(cgroup, {"job/cpu.max": "400000 100000\n", "job/step/cpu.max": "max 100000\n"})
    monkeypatch.setattr(cores, "allowed_cpus", lambda: set(range(16)))
    assert cgroup_cpu_quota(proc, cgroup) == 4.0
    assert usable_cores(proc, cgroup) == 4


def test_a_cgroup_v1_quota_seen_from_inside_a_container_rounds_down_as_ray_does(tmp_path, monkeypatch):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    # The container's own cgroup is its mount's root: the host's path it is listed under does not exist there.
    _files(proc, {"self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n"})
    _files(cgroup, {"cpu,cpuacct/cpu.cfs_quota_us": "150000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    monkeypatch.setattr(cores, "allowed_cpus", lambda: set(range(64)))
    assert cgroup_cpu_quota(proc, cgroup) == 1.5
    assert usable_cores(proc, cgroup) == 1
    (cgroup / "cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")  # no quota: the allowed CPUs
    assert cgroup_cpu_quota(proc, cgroup) is None and usable_cores(proc, cgroup) == 64
    assert cgroup_cpu_quota(tmp_path / "nowhere", cgroup) is None  # not Linux: no quota read


def test_torch_threads_are_capped_at_the_usable_cores_never_raised(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(cores, "usable_cores", lambda: 1)  # a quota of one core
        assert cap_torch_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setattr(cores, "usable_cores", lambda: 64)  # more cores than torch's threads: left as they are
        assert cap_torch_threads() == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_cpu_time_is_counted_over_the_cpus_the_process_may_run_on(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  40 0 4 40 0\ncpu0 10 0 1 10 0\ncpu1 10 0 1 10 0\ncpu2 10 0 1 10 0\ncpu3 10 0 1 10 0\n"
                    "intr 1 2 3\n")
    assert _proc_stat(stat, allowed={0, 2}) == [2, 20, 0, 2, 20, 0]
    assert _proc_stat(stat, allowed={7}) is None


def test_other_work_is_the_busy_cpu_time_less_this_process_trees():
    # cores, then user nice system idle iowait: 100 busy jiffies and 100 idle over the window, on 2 cores, 60 of the
    # busy ones this process tree's
    stats = iter([[2, 100, 0, 50, 800, 50], [2, 180, 0, 70, 880, 70]])
    own = iter([1000, 1060])
    other = other_work_cores(window=0, read_stat=lambda: next(stats), read_own_ticks=lambda: next(own))
    assert other == pytest.approx(2 * 40 / 200)
    assert other_work_cores(window=0, read_stat=lambda: None, read_own_ticks=lambda: 0) is None


def _stat(pid: int, name: str, parent: int, utime: int, stime: int, cutime: int, cstime: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"{pid} ({name}) S {parent} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0\n"


def test_tree_ticks_counts_a_process_its_descendants_and_the_children_they_waited_for(tmp_path):
    processes = {10: ("finesweep", 1, (5, 2, 30, 1)),  # the sweep: it has waited for children that used 31 ticks
                 11: ("raylet", 10, (7, 1, 0, 0)),
                 12: ("ray::trial) (a", 11, (100, 4, 0, 0)),  # a name with spaces and parentheses
                 13: ("browser", 1, (500, 50, 0, 0))}  # not the sweep's: left out
    for pid, (name, parent, ticks) in processes.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, name, parent, *ticks))
    (tmp_path / "self").mkdir()  # /proc's other entries are not processes
    assert tree_ticks(10, proc=tmp_path) == 38 + 8 + 104
    assert tree_ticks(99, proc=tmp_path) is None


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux's /proc")
def test_tree_ticks_on_this_machine_holds_a_busy_childs_cpu_time():
    # The child burns 0.2 s of CPU time of its own (however loaded the machine is), then says so and waits.
    burn = "import time\nwhile time.process_time() < 0.2: pass\nprint('done', flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        own = _own_ticks()  # this process alone, read first: the counters only grow
        childs = tree_ticks(child.pid)
        assert childs >= 0.2 * os.sysconf("SC_CLK_TCK") - 2  # its 0.2 s, within the ticks' rounding
        assert tree_ticks(os.getpid()) >= own + childs
    finally:
        child.kill()
        child.wait()


def _own_ticks() -> int:
    fields = open(f"/proc/{os.getpid()}/stat").read().rpartition(")")[2].split()
    return sum(map(int, fields[11:15]))


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux's /proc")
def test_a_busy_process_the_sweep_did_not_start_is_warned_about(caplog):
    # A busy loop orphaned by its shell: a process of this machine, not a descendant of this one.
    started = subprocess.run(["sh", "-c", "timeout 30 sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    busy_pid = int(started.stdout)
    try:
        with caplog.at_level(logging.WARNING):
            busy = warn_of_other_work()
    finally:
        os.kill(busy_pid, signal.SIGTERM)
    assert busy > 0.5
    warning = caplog.text
    assert f"other work keeps {busy:.1f} of the" in warning
    assert "RAY_worker_niceness=0" in warning and "Stop the other work" in warning


def test_the_warning_says_what_the_trials_priority_means_and_stays_silent_on_free_cores():
    assert other_work_warning(0.4, cores=2, threads=2, niceness=None) == ""  # under half a core: Ray's flicker
    assert other_work_warning(None, cores=2, threads=2, niceness=None) == ""  # no /proc: nothing measured
    low_priority = other_work_warning(1.3, cores=2, threads=2, niceness=None)
    assert "1.3 of the 2 CPU cores this sweep may use" in low_priority and "low priority" in low_priority
    assert "start the sweep with RAY_worker_niceness=0" in low_priority
    equal_terms = other_work_warning(1.3, cores=2, threads=2, niceness="0")
    assert "share those cores with it (RAY_worker_niceness=0)" in equal_terms
    assert "start the sweep with" not in equal_terms
    assert "start the sweep with" in other_work_warning(1.3, cores=2, threads=2, niceness="5")
    # A container's quota of 8 cores on a 64-CPU machine that other tenants keep half busy: free cores enough
    assert other_work_warning(32.0, cores=64, threads=8, niceness=None) == ""
    assert contended(1.3, threads=2, cores=2) and not contended(32.0, threads=8, cores=64)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs util-linux's taskset")
def test_a_sweep_allowed_one_cpu_fits_its_trials_to_it_and_finishes(tmp_path):
    """A job given one CPU of the machine (`taskset -c 0`, as Slurm or a cpuset gives it) with the default
    cpus_per_trial of 2: the local Ray gets the one core, each trial asks for it, and the sweep ends (with Ray's
    count of the machine's cores, or a trial's request of 2, no trial could run on the one core)."""
    sweep = one_model_sweep("onecore", 3, 1, 5, 10, quantization="none").replace("cpus_per_trial: 1, ", "")
    tiny.classification_folder(tmp_path, sweep, rows=200)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "resources.cpus_per_trial 2 -> 1" in " ".join(result.stdout.split())
    sweep_dir = tmp_path / "runs" / "onecore"
    trial, = trial_runs(sweep_dir)
    client, _ = store(sweep_dir)
    assert trial.data.tags[END_STATE_TAG] == "completed"
    assert [m.step for m in client.get_metric_history(trial.info.run_id, "eval_accuracy")] == [5, 10]
    assert json.loads((sweep_dir / "sweep-state.json").read_text())["config"]["resources"]["cpus_per_trial"] == 1
