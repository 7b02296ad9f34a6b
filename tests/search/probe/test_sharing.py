"""How trials share the GPUs when the sweep file leaves it open (search/probe/sharing.py): by the probe's peak
memory, capped by CPU cores; whole GPUs round-robin where one trial per GPU is what fits; the file's values kept."""

from __future__ import annotations

import pytest

from finesweep.search.probe import sharing
from finesweep.search.probe.batch_search import SAFETY_MARGIN
from finesweep.search.probe.device import Device
from finesweep.search.probe.table import ProbeResult
from finesweep.spaces import SweepConfig, SweepFileError

GiB = 2**30
H100 = Device("cuda", "NVIDIA H100", 80 * GiB, count=1, fp16=True)


def probe(train_peak: int, eval_peak: int = 0, micro: int = 8, max_micro: int = 16) -> ProbeResult:
    attempts = [{"batch": max_micro, "peak_bytes": train_peak * 2, "seconds_per_step": 1.0},
                {"batch": micro, "peak_bytes": train_peak, "seconds_per_step": 0.5},
                {"batch": 2 * max_micro, "peak_bytes": eval_peak, "seconds_per_step": 0.5, "mode": "eval"},
                {"batch": 64, "peak_bytes": 79 * GiB, "seconds_per_step": 0.0, "out_of_memory": True}]
    return ProbeResult(model="m", precision="bf16", method="full", seq_len=128, device="cuda", budget_bytes=80 * GiB,
                       max_micro_batch=max_micro, attempts=attempts, micro_batch=micro, best_micro_batch=micro)


def config(**resources_and_search) -> SweepConfig:
    search = {k: v for k, v in resources_and_search.items() if k == "max_concurrent_trials"}
    resources = {k: v for k, v in resources_and_search.items() if k != "max_concurrent_trials"}
    return SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "m"}],
                                       "search": search, "resources": {"cpus_per_trial": 2, **resources}})


def shared(cfg: SweepConfig, device: Device, probes, cores: int = 16) -> tuple[float, int]:
    resolved, _ = sharing.share_devices(cfg, device, probes, cpu_cores=cores)
    return resolved.resources.gpus_per_trial, resolved.search.max_concurrent_trials


def test_the_peak_is_the_used_micro_batchs_or_the_evaluations_whichever_is_higher():
    assert sharing.peak_bytes({"a": probe(10 * GiB, eval_peak=4 * GiB)}) == 10 * GiB  # not the max micro-batch's 20
    assert sharing.peak_bytes({"a": probe(3 * GiB, eval_peak=5 * GiB), "b": probe(2 * GiB)}) == 5 * GiB


def test_without_cuda_trials_take_no_gpu_and_run_one_at_a_time_unless_told():
    cpu = Device("cpu", "x86_64", 24 * GiB)
    assert shared(config(), cpu, {"a": probe(GiB)}) == (0, 1)
    assert shared(config(max_concurrent_trials=2), cpu, {"a": probe(GiB)}) == (0, 2)


def test_trials_share_a_gpu_as_many_as_their_peak_memory_lets_fit():
    per_trial = 10 * GiB * (1 + SAFETY_MARGIN) + sharing.CUDA_CONTEXT_BYTES
    fit = int(80 * GiB // per_trial)
    assert fit == 6
    assert shared(config(), H100, {"a": probe(10 * GiB)}) == (pytest.approx(1 / 6, abs=1e-4), 6)


def test_cpu_cores_cap_the_trials_at_once():
    assert shared(config(), H100, {"a": probe(GiB)}, cores=8) == (0.25, 4)  # 8 cores / 2 per trial


def test_one_trial_per_gpu_takes_whole_gpus_round_robin():
    two = Device("cuda", "NVIDIA H100", 80 * GiB, count=2, fp16=True)
    assert shared(config(), two, {"a": probe(50 * GiB)}) == (1.0, 2)


def test_the_files_values_are_kept_and_the_other_follows_them():
    assert shared(config(max_concurrent_trials=2), H100, {"a": probe(GiB)}) == (0.5, 2)  # 2 wanted: half a GPU each
    assert shared(config(gpus_per_trial=0.25), H100, {"a": probe(GiB)}) == (0.25, 4)  # 4 fit with a quarter each
    assert shared(config(gpus_per_trial=0.5, max_concurrent_trials=3), H100, {"a": probe(GiB)}) == (0.5, 3)
    assert shared(config(gpus_per_trial=0), H100, {"a": probe(GiB)}) == (0, 1)  # 0: the CPU, by request


def test_data_parallel_trials_take_a_whole_gpu_per_rank():
    four = Device("cuda", "NVIDIA H100", 80 * GiB, count=4, fp16=True)
    assert shared(config(workers_per_trial=2), four, {"a": probe(GiB)}, cores=32) == (1.0, 2)
    # The file's whole GPU per rank: 4 GPUs hold 2 two-rank trials, not 4.
    assert shared(config(workers_per_trial=2, gpus_per_trial=1), four, {"a": probe(GiB)}, cores=32) == (1, 2)


def test_a_trial_asking_more_cpu_cores_than_the_sweep_may_use_is_fitted_to_them():
    fitted, note = sharing.fit_trial_cpus(config(cpus_per_trial=2), cores=1)  # the default 2 in a 1-core job
    assert fitted.resources.cpus_per_trial == 1
    assert "resources.cpus_per_trial 2 -> 1" in note and "may use 1" in note and "cpus_per_trial: 1" in note
    kept, note = sharing.fit_trial_cpus(config(cpus_per_trial=2), cores=2)
    assert kept.resources.cpus_per_trial == 2 and note == ""
    two_workers, _ = sharing.fit_trial_cpus(config(cpus_per_trial=2, workers_per_trial=2), cores=3)
    assert two_workers.resources.cpus_per_trial == 1  # 2 workers x 1 core fit in 3
    with pytest.raises(SweepFileError, match=r"resources.workers_per_trial: 4 data-parallel workers .* may use 2"):
        sharing.fit_trial_cpus(config(cpus_per_trial=1, workers_per_trial=4), cores=2)
