"""Sweeps as Ray jobs (Ray's Jobs API): `finesweep submit` runs the whole sweep, its driver included, on the cluster's
head, and returns; `status`, `logs` and `stop` find the job from any machine by the sweep's name and the cluster's
dashboard address. The cluster's Python must have finesweep installed (the one `ray start` runs); the sweep file,
its data and its output_root must lie on storage the head reads at the same path (a mount every node and the user
share), where the sweep folder, its tracking store and its export then are."""

from __future__ import annotations

import functools
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from finesweep.search.inputs import sweep_folder
from finesweep.spaces import SweepConfig, SweepFileError

SWEEP_METADATA = "finesweep.sweep"  # the job's metadata: the sweep's name
FOLDER_METADATA = "finesweep.folder"  # and its folder, as the head sees it
# Ray's job states that end a job.
ENDED = {"SUCCEEDED", "FAILED", "STOPPED"}


@dataclass(frozen=True)
class SweepJob:
    """One submitted sweep as the cluster knows it."""

    name: str
    job_id: str
    status: str
    folder: str
    message: str = ""


@functools.lru_cache(maxsize=None)
def client(address: str):
    """Ray's job client for the dashboard at `address` (http://HEAD:8265), or a one-paragraph error; one per address
    in a command (each one asks the dashboard for its version when made)."""
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise SweepFileError(
            f"--address {address}: no Ray dashboard answers there ({_first_line(error)}). A job is submitted to the "
            "head's dashboard, http://HEAD:8265 by default: start the head with `ray start --head "
            "--dashboard-host 0.0.0.0` (or reach it through a tunnel), and check the host and port.") from None


def submit(config: SweepConfig, sweep_file: Path, address: str, options: list[str]) -> SweepJob:
    """Submit `sweep_file` (already loaded and validated as `config`) as a Ray job that runs `finesweep run` on the
    head, joined to its cluster, in this command's folder (a relative output_root lands where `run` here would put
    it); `options` are run's own (--time-limit, --tracking-uri). Returns at once."""
    jobs = client(address)
    folder = str(sweep_folder(config).root)
    running = [job.submission_id for job in jobs.list_jobs()
               if (job.metadata or {}).get(SWEEP_METADATA) == config.name and str(job.status.value) not in ENDED]
    if running:
        raise SweepFileError(
            f"sweep {config.name} is already running on {address} (job {running[0]}): two runs of one sweep would "
            f"write the same folder. Follow it with `finesweep logs {config.name} --address {address}`, stop it with "
            f"`finesweep stop {config.name} --address {address}`, or give this sweep another name.")
    check_storage(jobs, sweep_file.resolve(), Path.cwd())
    run = ["finesweep", "run", str(sweep_file.resolve()), "--address", "auto", *options]
    entrypoint = f"{shlex.join(['cd', str(Path.cwd())])} && {shlex.join(run)}"
    job_id = jobs.submit_job(entrypoint=entrypoint, submission_id=f"finesweep-{config.name}-{int(time.time())}",
                             metadata={SWEEP_METADATA: config.name, FOLDER_METADATA: folder})
    return SweepJob(config.name, job_id, "PENDING", folder)


# How long the storage check's job may take: a job's start is a process on the head, a second or two.
CHECK_SECONDS = 60.0


def check_storage(jobs, sweep_file: Path, folder: Path) -> None:
    """A clear error, before the sweep is submitted, where the head does not see `sweep_file` or cannot write in
    `folder` (where the job runs, and a relative output_root lands) at the same paths: storage only this machine
    sees. A job of its own on the head, which runs a shell's `test` on both."""
    check = " && ".join(shlex.join(words) for words in (["test", "-r", str(sweep_file)], ["test", "-d", str(folder)],
                                                        ["test", "-w", str(folder)]))
    job_id = jobs.submit_job(entrypoint=check, metadata={"finesweep.check": "storage"})
    deadline = time.monotonic() + CHECK_SECONDS
    while (status := str(jobs.get_job_status(job_id).value)) not in ENDED:
        if time.monotonic() > deadline:
            raise SweepFileError(f"the cluster's head did not run a one-line check job ({job_id}) in "
                                 f"{CHECK_SECONDS:.0f} s: look at `ray job logs {job_id}` on the cluster")
        time.sleep(0.2)
    if status != "SUCCEEDED":
        raise SweepFileError(
            f"{sweep_file}: the cluster's head does not read this sweep file, or cannot write in {folder}, at the same "
            "paths: a submitted sweep runs on the head and writes its folder there. Put the sweep file, its data "
            "and the folder you submit from on storage every node and this machine mount at the same path (a shared "
            "file system), and submit from there.")


def find(address: str, sweep: str) -> SweepJob:
    """The latest job of the sweep named `sweep` (or the job whose id it is) on the cluster at `address`."""
    listed = client(address).list_jobs()
    found = [job for job in listed if sweep in (job.submission_id, (job.metadata or {}).get(SWEEP_METADATA))]
    if not found:
        named = sorted({(job.metadata or {}).get(SWEEP_METADATA) for job in listed} - {None})
        raise SweepFileError(
            f"{sweep}: no sweep of that name or job id was submitted to {address} (its sweeps: "
            f"{', '.join(named) or 'none'}). Submit it with `finesweep submit SWEEP_FILE --address {address}`.")
    job = max(found, key=lambda job: job.start_time or 0)
    metadata = job.metadata or {}
    return SweepJob(metadata.get(SWEEP_METADATA, sweep), job.submission_id, str(job.status.value), metadata.get(
        FOLDER_METADATA, ""), job.message or "")


def logs(address: str, job: SweepJob) -> str:
    """What the job's driver printed so far: the sweep's console, as `run` shows it."""
    return client(address).get_job_logs(job.job_id)


def follow(address: str, job: SweepJob, write: Callable[[str], object]) -> None:
    """The job's console to `write` as it comes, until the job ends (Ray's tail of its logs, an async stream)."""
    import asyncio

    async def tail() -> None:
        async for chunk in client(address).tail_job_logs(job.job_id):
            write(chunk)

    asyncio.run(tail())


def stop(address: str, job: SweepJob) -> bool:
    """Ask Ray to stop the job (SIGTERM to its driver: the sweep ends as `run` does on SIGTERM, its trials stopped,
    resumable); False where it had ended already."""
    return client(address).stop_job(job.job_id)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
