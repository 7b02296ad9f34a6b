"""The probe's answers kept on disk: the machine's cache every sweep shares and each sweep's own record, keyed by what
an answer depends on (search/probe/table.py reads and writes them)."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from filelock import FileLock

from finesweep.search.probe.batch_search import SAFETY_MARGIN, SEED_BATCHES
from finesweep.search.probe.device import Device
from finesweep.spaces import Task
from finesweep.spaces.files import machine_cache, write_json_atomic
from finesweep.trainer.probe_step import DECODE_PROBE_TOKENS, ProbeRequest


# What a probe's answer does not depend on: the candidate's name, and the head a classifier reads (the mean of the
# token states or the first token's: the same encoder trains under either, at the same memory and speed within the
# probe's noise). The example's two heads on one MiniLM were probed twice, 16 s of a 413-s command.
NOT_MEASURED_BY_THE_PROBE = ("name", "pooling")


def fingerprint(request: ProbeRequest, device: Device, budget: int, threads: int) -> str:
    """What a probe result depends on: the model (its files as they are now, whatever its head; see
    NOT_MEASURED_BY_THE_PROBE), how it trains, the device, the threads timing it and the libraries measuring it. A
    causal LM's answers also hold its decoding's timing, and every answer the model's parameter count (answers
    cached before either lack it, so they are measured again)."""
    decoding = {"decode_tokens": DECODE_PROBE_TOKENS} if request.task == Task.causal_lm.value else {}
    candidate = {key: value for key, value in request.candidate.items() if key not in NOT_MEASURED_BY_THE_PROBE}
    return json.dumps({**decoding, "counts": "parameters", "candidate": candidate,
                       "files": model_files(request.candidate.get("path")), "task": request.task,
                       "labels": request.num_labels, "precision": request.precision, "method": request.method, "seq_len": request.seq_len,
                       "lora_r": request.lora_r, "checkpointing": request.gradient_checkpointing, "cap": request.batch,
                       "frozen_embeddings": request.freeze_embeddings,
                       "device": [device.kind, device.name, device.total_memory], "threads": threads,
                       "budget": budget, "margin": SAFETY_MARGIN, "seeds": SEED_BATCHES,
                       "torch": version("torch"), "transformers": version("transformers")}, sort_keys=True)


def model_files(path: str | None) -> list[tuple[str, int, int]] | None:
    """A local model folder's files by name, size and modification time: a model saved again at the same path is
    another model to the cache. None for a hub model (its revision, in the candidate, names it)."""
    if not path or not Path(path).is_dir():
        return None
    return sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in Path(path).iterdir() if f.is_file())


def machine_probe_file() -> Path:
    """The probe's answers every sweep on this machine shares (in the machine cache; see spaces/files.py)."""
    return machine_cache() / "probe" / "probe.json"


def read_cache(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def add_to_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    """One answer added to a cache file, read again under a lock so that two sweeps probing at once keep both."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(path.name + ".lock"))):
        write_json_atomic(path, {**read_cache(path), key: entry}, indent=1)
