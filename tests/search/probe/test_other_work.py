"""Other work on the machine as the trials start: what it keeps busy, leaving out the sweep's own processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

import pytest

from finesweep.search.probe.device import (contended, other_work_cores, other_work_warning, tree_ticks,
                                           warn_of_other_work)


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
    assert f"other work keeps {busy:.1f} of this machine's" in warning
    assert "RAY_worker_niceness=0" in warning and "Stop the other work" in warning


def test_the_warning_says_what_the_trials_priority_means_and_stays_silent_on_free_cores():
    assert other_work_warning(0.4, cores=2, niceness=None) == ""  # under half a core: Ray's and the driver's flicker
    assert other_work_warning(None, cores=2, niceness=None) == ""  # no /proc: nothing measured
    low_priority = other_work_warning(1.3, cores=2, niceness=None)
    assert "1.3 of this machine's 2 CPU cores" in low_priority and "low priority" in low_priority
    assert "start the sweep with RAY_worker_niceness=0" in low_priority
    equal_terms = other_work_warning(1.3, cores=2, niceness="0")
    assert "share those cores with it (RAY_worker_niceness=0)" in equal_terms
    assert "start the sweep with" not in equal_terms
    assert "start the sweep with" in other_work_warning(1.3, cores=2, niceness="5")
    assert contended(1.3, threads=2, cores=2)
