"""GGUF candidates, dequantized once: a GGUF file becomes a plain safetensors model folder in the sweep's cache.

A model loaded from a GGUF file is unpacked on every load (17-31 s per probe attempt for SmolLM2-135M), and
transformers marks it quantized (config.quantization_config is a GgufConfig), so the Trainer refuses to fine-tune
it. Here the file is unpacked once, by transformers' own GGUF loader told to dequantize (which leaves no
quantization marker), and saved as a folder of float32 safetensors, config, generation config and tokenizer that
every later load reads like any other model folder. The folder is keyed by the file's bytes and by the versions of
the code that unpacks them, so a renamed copy of a file reuses it and a changed file gets a new one. It lives in
the machine's cache (machine_cache(): every sweep on the machine shares it, as the Hugging Face hub cache is
shared), and a lock per entry makes a second sweep that starts meanwhile wait for the first one's copy.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from filelock import FileLock

from finesweep.spaces import ModelCandidate, SweepConfig, SweepFileError
from finesweep.spaces.files import write_json_atomic

log = logging.getLogger(__name__)

GGUF_PACKAGE = "gguf>=0.10"  # transformers reads llama-family GGUF files with it (as in pyproject.toml)
CACHE_VERSION = "1"  # change when the folder's layout or the way it is made changes: old entries are then not reused
CACHE_SUBFOLDER = "gguf"
LOCK_SUBFOLDER = "locks"  # beside gguf/, so that gguf/ holds the entries alone
ORIGIN_FILE = "gguf-origin.json"  # written last: a folder that has it is complete


def gguf_path(candidate: ModelCandidate) -> Path:
    """The candidate's GGUF file on this machine (a hub candidate's is downloaded into the hub cache)."""
    if candidate.path:
        return Path(candidate.path) / str(candidate.gguf_file)
    from transformers.utils import cached_file

    return Path(cached_file(candidate.hub_id, candidate.gguf_file, revision=candidate.revision))


def gguf_origin(candidate: ModelCandidate) -> str:
    """How the model card names the file: its path, or the hub repo, file and revision."""
    if candidate.path:
        return str(gguf_path(candidate))
    return f"{candidate.hub_id}/{candidate.gguf_file}" + (f"@{candidate.revision}" if candidate.revision else "")


def check_gguf(config: SweepConfig) -> None:
    """Before anything runs: every GGUF candidate of the space can be read here (the gguf package is installed, a
    local file exists). Every problem in one error."""
    problems = []
    for i, candidate in enumerate(config.models):
        if not candidate.gguf_file or candidate.name not in config.model_names:
            continue
        where = f"models[{i}].gguf_file"
        if (installed := _installed_gguf()) is None or not _new_enough(installed):
            found = "not installed" if installed is None else f"gguf {installed} is installed"
            problems.append(f"{where}: reading a GGUF file needs the gguf package ({GGUF_PACKAGE}), but {found}. "
                            f"Install it (pip install '{GGUF_PACKAGE}'; scripts/setup.sh does), or give "
                            f"models[{i}].path a model folder instead of a GGUF file.")
        if candidate.path and not gguf_path(candidate).is_file():
            problems.append(f"{where}: the file {candidate.gguf_file!r} is not in models[{i}].path "
                            f"({candidate.path}). Give the GGUF file's name inside that folder.")
    if problems:
        raise SweepFileError("\n".join(list(dict.fromkeys(problems))))


def _installed_gguf() -> str | None:
    """The gguf package's version, or None when it cannot be imported."""
    try:
        import gguf  # noqa: F401 - importable is what transformers needs, not just installed metadata
    except ImportError:
        return None
    try:
        return version("gguf")
    except PackageNotFoundError:
        return "unknown"


def _new_enough(installed: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(installed) >= Version(GGUF_PACKAGE.split(">=")[1])
    except InvalidVersion:
        return True  # a source checkout without a release number: let transformers judge it


def dequantized_candidate(candidate: ModelCandidate, cache_root: Path, folder: Path | None = None) -> ModelCandidate:
    """The candidate as a plain model folder (dequantized once, see module doc; `folder`: its copy, already found
    with cached_folder), with its GGUF origin on record. config_overrides stay on the candidate: they are applied
    when the folder is loaded, like any folder's."""
    folder = folder or dequantized_folder(gguf_path(candidate), Path(cache_root))
    fields = candidate.model_dump(exclude={"hub_id", "revision", "gguf_file", "path", "gguf_origin"})
    return ModelCandidate.model_validate({**fields, "path": str(folder), "gguf_origin": gguf_origin(candidate)})


def from_lost_folder(candidate: ModelCandidate) -> ModelCandidate:
    """A dequantized candidate whose folder is gone (the sweep's cache was cleared) as its GGUF file again, when
    that file is on this machine, so that the folder is made again; any other candidate as it is."""
    origin = Path(candidate.gguf_origin) if candidate.gguf_origin else None
    if origin is None or Path(str(candidate.path)).is_dir() or not origin.is_file():
        return candidate
    fields = candidate.model_dump(exclude={"path", "gguf_origin"})
    return ModelCandidate.model_validate({**fields, "path": str(origin.parent), "gguf_file": origin.name})


def cached_folder(source: Path, cache_root: Path) -> Path | None:
    """The complete dequantized copy of `source` in `cache_root`, or None when there is none yet."""
    final = cache_root / CACHE_SUBFOLDER / cache_key(file_digest(source))
    return final if (final / ORIGIN_FILE).is_file() else None


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def dequantized_folder(source: Path, cache_root: Path) -> Path:
    """cache_root/gguf/<key of the file's bytes and the unpacking code>: made on the first call, reused after.
    Another process making the same entry meanwhile is waited for (a lock file in cache_root/locks), not raced."""
    key = cache_key(file_digest(source))
    final, lock = cache_root / CACHE_SUBFOLDER / key, cache_root / LOCK_SUBFOLDER / f"gguf-{key}.lock"
    final.parent.mkdir(parents=True, exist_ok=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        if (final / ORIGIN_FILE).is_file():
            log.info("GGUF %s: dequantized copy found in %s", source.name, final)
            return final
        return _make_folder(source, final)


def _make_folder(source: Path, final: Path) -> Path:
    digest = file_digest(source)
    work = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    try:
        write_folder(source, work)
        record = {"gguf_file": str(source), "sha256": digest, "seconds": round(time.perf_counter() - started, 1),
                  **_versions()}
        write_json_atomic(work / ORIGIN_FILE, record)
        _publish(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gone already when published
    log.info("GGUF %s: dequantized in %.1f s into %s", source.name, record["seconds"], final)
    return final


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes, read in 1 MiB chunks (GGUF files run to gigabytes: 10 s for 4 GB), once per
    version of the file in a process (the tokenizer's look-up and the dequantization both ask)."""
    stat = Path(path).stat()
    return _digest(Path(path).resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: Path, size: int, mtime_ns: int) -> str:  # size and time: a file rewritten in place is read again
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_key(file_sha256: str) -> str:
    """The file's bytes and what unpacks them (transformers and gguf turn blocks into floats; a new version may
    unpack differently). Not the candidate's name, path or config_overrides: those are applied at load."""
    parts = [CACHE_VERSION, file_sha256, *(f"{name}={value}" for name, value in sorted(_versions().items()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _versions() -> dict[str, str]:
    return {"transformers": version("transformers"), "gguf": _installed_gguf() or "none"}


def write_folder(source: Path, out: Path) -> None:
    """Unpack the GGUF file `source` into `out`: float32 safetensors, config.json without quantization_config,
    generation_config.json, tokenizer files (the file's chat template included)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # float32 holds every GGUF value exactly (blocks of small integers times fp16 scales, or fp16/bf16 weights);
    # training precision is the trial's autocast, as for every other candidate.
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32,
                                                 **_dequantize_kwargs())
    if getattr(model.config, "quantization_config", None) is not None or getattr(model, "is_quantized", False):
        raise RuntimeError(f"{source}: transformers {version('transformers')} loaded the GGUF file as a quantized "
                           "model even when asked to dequantize it; the Trainer cannot fine-tune that. Use the "
                           "transformers version of pyproject.toml, or give a safetensors model folder instead.")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(out)


def _dequantize_kwargs() -> dict:
    """GgufConfig(dequantize=True): dense weights, and transformers drops the quantization marker. A transformers
    without GgufConfig gets a plain load; write_folder's check says so if that leaves the marker."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _publish(work: Path, final: Path) -> None:
    """Move the finished folder into place in one step, so a crash never leaves half a cache entry."""
    try:
        os.replace(work, final)
    except OSError:  # another sweep published the same entry first: theirs is identical
        shutil.rmtree(work, ignore_errors=True)
