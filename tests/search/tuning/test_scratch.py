"""Trials' scratch folders in Ray's session folder: what a trial killed while saving leaves there (a half-written
checkpoint, which Ray would keep until reboot) is removed by the driver once Tune is done."""

from __future__ import annotations

import shutil


def test_the_driver_removes_its_sweeps_scratch_folders_and_no_other_sweeps():
    import ray
    from finesweep.search.tuning.ray_compat import train_session_dir

    from finesweep.search.tuning.scratch import remove_scratch_left_here
    from finesweep.search.tuning.ray_cluster import start_ray

    start_ray(None)
    run = train_session_dir() / "2026-11-22_10-00-00"
    try:
        mine, other = (run / experiment / "working_dirs" / "trial-a" for experiment in ("tune-mine", "tune-other"))
        for trial in (mine, other):
            half_written = trial / "finesweep-a" / "checkpoint-50"
            half_written.mkdir(parents=True)
            (half_written / "model.safetensors").write_bytes(b"\x08")
        remove_scratch_left_here("tune-mine")
        assert mine.is_dir() and not (mine / "finesweep-a").exists()
        assert (other / "finesweep-a" / "checkpoint-50" / "model.safetensors").is_file(), "another sweep's stays"
    finally:
        shutil.rmtree(run, ignore_errors=True)
        ray.shutdown()
