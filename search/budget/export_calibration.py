"""The export's estimate corrected by this machine's own exports. export_time prices each step from the probe's
speeds and rules measured on a few machines and models (the LLM example's export was predicted at 539 s and took
376 s: bitsandbytes' int8 scored as fast as full precision there, not half as fast). So after an export, each
step's seconds over the rules' prediction for it is kept in the machine cache (export/calibration.json) under what
that error depends on: the candidate models (their files), the task, the device, the threads and the libraries.
The next plan for the same candidates on this machine multiplies each step of the rules' estimate by the largest
ratio of its last KEPT_EXPORTS exports (a ratio under 1 drawn towards the rules' 1.0 while fewer are known), and says
so. A first sweep, or one of other candidates, is priced by the rules alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finesweep.search.probe.answers import add_to_cache, model_files, read_cache
from finesweep.spaces import SweepConfig
from finesweep.spaces.files import machine_cache

if TYPE_CHECKING:
    from finesweep.search.budget.plan import SearchPlan

log = logging.getLogger(__name__)

# One export's ratio, kept within these bounds: a step that an interrupted or overloaded export stretched (or a
# cache-warm one shortened) must not make the next estimate absurd.
RATIO_BOUNDS = (0.25, 4.0)
# A step this short is left as the rules price it: its ratio would be noise (the references' step of a sweep whose
# baseline is the winner takes no time at all).
MIN_STEP_SECONDS = 2.0
# An export's time varies from run to run on one machine (the LLM example's four steps took 370 s and 428 s, each
# step 0.85x to 0.88x of the other's; its baseline's scoring 0.57x and then 0.79x of the rules' prediction): the
# largest ratio of the last exports prices the next one, so that its plan errs on the side of ending early rather
# than past a time limit (limit.py keeps a share of the estimate spare). One export is too few to lower the estimate
# by its whole ratio: a ratio under 1 is drawn towards 1.0 by the share of KEPT_EXPORTS not yet measured.
KEPT_EXPORTS = 3
LIBRARIES = ("torch", "transformers", "bitsandbytes", "onnxruntime", "llama_cpp_python")


def calibration_file() -> Path:
    return machine_cache() / "export" / "calibration.json"


def calibration_key(config: SweepConfig, device: list[Any], threads: float) -> str:
    """What the estimate's error depends on, hashed: the candidates (each model's files as they are now: a model
    saved again at its path is another model), the task, the device (kind, name, memory), the export's threads and
    the libraries that make and run the variants."""
    candidates = [{**candidate.model_dump(mode="json", exclude={"name", "pooling"}),
                   "files": model_files(candidate.path)} for candidate in config.models]
    described = json.dumps({"candidates": candidates, "task": config.data.task.value, "device": device,
                            "threads": threads, "libraries": {name: _version(name) for name in LIBRARIES}},
                           sort_keys=True)
    return hashlib.sha256(described.encode()).hexdigest()[:20]


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def ratios(key: str, cache: Path | None = None) -> dict[str, float]:
    """Step -> the largest ratio of this machine's last KEPT_EXPORTS exports of these candidates (empty: none yet)."""
    measured = (read_cache(cache or calibration_file()).get(key) or {}).get("measured") or {}
    return {step: _trusted(kept) for step, kept in measured.items() if kept}


def _trusted(kept: list[float]) -> float:
    """The largest of a step's kept ratios; one under 1 (the rules over-estimated) lowers the estimate by the share
    of KEPT_EXPORTS measured, so a single quick export cannot price the next one past a time limit."""
    largest = max(kept)
    if largest >= 1.0:
        return largest
    missing = max(KEPT_EXPORTS - len(kept), 0) / KEPT_EXPORTS
    return round(largest + (1.0 - largest) * missing, 3)


def calibrated(steps: dict[str, float], known: dict[str, float]) -> dict[str, float]:
    """The rules' estimate per step, each multiplied by its measured ratio where there is one."""
    return {step: seconds * known.get(step, 1.0) for step, seconds in steps.items()}


def note(known: dict[str, float]) -> str:
    """The plan's line saying which steps a measured ratio corrected, and by how much."""
    by_step = ", ".join(f"{step} x{ratio:.2f}" for step, ratio in known.items())
    return (f"export estimate corrected by this machine's last export of these candidates ({by_step}: its seconds "
            "over the rules' prediction; search/budget/export_calibration.py)")


def learn(plan: SearchPlan | None, seconds: dict[str, float], not_made: dict[str, str],
          cache: Path | None = None) -> dict[str, float]:
    """After an export: each step's seconds over the rules' prediction for it (the plan's estimate without the
    ratios it applied), kept (the last KEPT_EXPORTS of a step) for the next plan under the plan's calibration key.
    Steps that failed, took under MIN_STEP_SECONDS or had no prediction teach nothing; nothing is kept without a
    plan (a re-export), nor where the cache cannot be written (logged: the export is done). Returns the ratios
    learned."""
    record = plan.export_calibration if plan else {}
    predicted = plan.export_steps if plan else {}
    if not record.get("key"):
        return {}
    applied = record.get("ratios") or {}
    learned = {}
    for step, taken in seconds.items():
        rules = predicted.get(step, 0.0) / applied.get(step, 1.0)
        if step in not_made or taken < MIN_STEP_SECONDS or rules <= 0:
            continue
        learned[step] = round(min(max(taken / rules, RATIO_BOUNDS[0]), RATIO_BOUNDS[1]), 3)
    if learned:
        try:
            _keep(cache or calibration_file(), record["key"], learned)
        except OSError as error:
            log.warning("export: the machine cache kept no calibration of the export's estimate (%s)", error)
            return {}
    return learned


def _keep(cache: Path, key: str, learned: dict[str, float]) -> None:
    """The new ratios after the key's earlier ones, the last KEPT_EXPORTS of each step."""
    measured = (read_cache(cache).get(key) or {}).get("measured") or {}
    for step, ratio in learned.items():
        measured[step] = [*measured.get(step, []), ratio][-KEPT_EXPORTS:]
    add_to_cache(cache, key, {"measured": measured, "updated": time.strftime("%Y-%m-%d %H:%M:%S")})
