"""Trials' scratch folders in Ray's session folder: what a trial killed while saving leaves there (a half-written
checkpoint, which Ray would keep until reboot) is removed by the driver once Tune is done."""

from __future__ import annotations

import shutil
from types import SimpleNamespace


def test_the_driver_removes_its_sweeps_scratch_folders_and_no_other_sweeps(monkeypatch):
    """Two sweeps on one Ray node, started in the same second (a script launching several; two test files once),
    still have names of their own: with the start time alone, one's clean-up removed the other's folders."""
    import ray
    from finesweep.search.tuning.ray_compat import train_session_dir

    from finesweep.search.tuning.scratch import remove_scratch_left_here
    from finesweep.search.tuning.ray_cluster import start_ray
    from finesweep.search import sweep

    start_ray(None)
    run = train_session_dir() / "2026-11-22_10-00-00"
    try:
        # The same second for both (the sweep module's clock only: logging's keeps the real one).
        monkeypatch.setattr(sweep, "time", SimpleNamespace(strftime=lambda _: "20261202-073553"))
        names = [sweep.tune_experiment_name() for _ in range(2)]
        assert names[0] != names[1] and names[0].startswith("tune-20261202-073553-")
        mine, other = (run / experiment / "working_dirs" / "trial-a" for experiment in names)
        for trial in (mine, other):
            half_written = trial / "finesweep-a" / "checkpoint-50"
            half_written.mkdir(parents=True)
            (half_written / "model.safetensors").write_bytes(b"\x08")
        remove_scratch_left_here(names[0])
        assert mine.is_dir() and not (mine / "finesweep-a").exists()
        assert (other / "finesweep-a" / "checkpoint-50" / "model.safetensors").is_file(), "another sweep's stays"
    finally:
        shutil.rmtree(run, ignore_errors=True)
        ray.shutdown()
