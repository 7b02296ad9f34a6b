"""The disk a sweep writes to. Each trial's checkpoints (the weights and, for a full fine-tune, the optimizer's
state: about three times the weights) and the export's variants are where a sweep's bytes go. What the user is told
when the disk fills: a full disk cuts a file mid-write wherever the write happened (a trial inside Ray, the export, a
library's log), so the error is recognised in whatever wraps it. What a finished sweep drops: the optimizer state,
once nothing trains from its checkpoints any more."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

# How a full disk reads where the OSError itself did not travel (Ray hands a trial's error on as its text).
_WORDS = (os.strerror(errno.ENOSPC), f"[Errno {errno.ENOSPC}]")


def full_disk(error: BaseException) -> OSError | None:
    """The OSError "No space left on device" behind `error` (itself, its causes, or their text), or a stand-in
    carrying no file name where only the text said so; None where the disk did not fill."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        current = current.__cause__ or current.__context__
    if any(words in str(error) for words in _WORDS):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def full_disk_paragraph(error: OSError) -> str:
    """What the user reads when the disk filled: the file being written (else the working folder), what is free on
    its disk now, where a sweep's bytes go, and the fix (free space or keep fewer checkpoints, then resume: what was
    saved is kept)."""
    written = Path(error.filename) if error.filename else Path.cwd()
    folder = _existing(written)
    free = shutil.disk_usage(folder).free / 2**30
    target = f"writing {written}" if error.filename else f"under {folder}"
    return (f"the disk filled up ({os.strerror(errno.ENOSPC)}) {target}: {free:.1f} GiB free there now. A sweep "
            "writes each trial's checkpoints (the weights and, for a full fine-tune, the optimizer's state: about "
            "three times the weights; each trial keeps search.keep_checkpoints of its best and its latest) and the "
            "export's variants. Free space on that disk, or lower search.keep_checkpoints, then run `finesweep "
            "resume` on the sweep file or its folder: the trials and checkpoints saved so far are kept.")


def _existing(path: Path) -> Path:
    """`path`, or its nearest folder that exists (the file a full disk cut may be gone)."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path.cwd()


def drop_optimizer_states(folder: Path) -> int:
    """Delete the Trainer's optimizer, scheduler and gradient-scaler state from every checkpoint under `folder` (the
    sweep's Tune storage), once nothing of the sweep trains any more: what training on from a checkpoint needs, and
    for a full fine-tune twice the weights (AdamW's two moments). The weights, the Trainer's state (its evaluations)
    and the row scores stay, so every checkpoint still loads, competes and exports. Returns the bytes freed."""
    from transformers.trainer import OPTIMIZER_NAME, OPTIMIZER_NAME_BIN, SCALER_NAME, SCHEDULER_NAME

    names = {OPTIMIZER_NAME, OPTIMIZER_NAME_BIN, SCHEDULER_NAME, SCALER_NAME}
    freed = 0
    for state in Path(folder).rglob("*"):
        if state.name in names and state.is_file() and \
                any(part.startswith("checkpoint") for part in state.relative_to(folder).parts):
            freed += state.stat().st_size
            state.unlink()
    return freed
