"""The tracking spool: MLflow writes that could not reach the server, kept on disk in order and replayed by
`finesweep sync`.

<sweep>/tracking-spool/
  <host>-<pid>.jsonl   one JSON line per write a process could not send, in the order it made them
  artifacts/           copies of the files those writes upload
  index/created.jsonl  every run this sweep created on this machine (real or placeholder id, with its tags),
                       so a restarted trial finds its run while the server is down
  index/held/<run id>  marks a run with writes in the spool: later writes to it join them, so that replay keeps
                       that run's order (an older spooled tag must not overwrite a newer one sent directly)
  replayed.json        sync's progress: lines replayed per file, placeholder id -> real id, lines skipped

Every process of a local Ray shares this folder (one machine, one disk). On a multi-node cluster each node's
trials write the same path on their own node, and `finesweep sync` replays the folder of the machine it runs
on: gather the other nodes' `*.jsonl` and `artifacts/` into the controller's spool folder first (file names
carry the host, so they do not collide), so placeholders made on one node resolve with the others.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from finesweep.spaces.files import write_json_atomic

SPOOL_FOLDER = "tracking-spool"
PLACEHOLDER_PREFIX = "offline-"  # MLflow's own ids are hex: a placeholder can never be mistaken for one
_LOCK = threading.Lock()


def new_placeholder(kind: str) -> str:
    """A local id for an experiment or run that could not be created; sync maps it to the real one."""
    return f"{PLACEHOLDER_PREFIX}{kind}-{uuid.uuid4().hex}"


def is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PLACEHOLDER_PREFIX)


def map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    """`obj` with every string inside it (dict values, list items) passed through `fn`."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {key: map_strings(value, fn) for key, value in obj.items()}
    if isinstance(obj, list):
        return [map_strings(value, fn) for value in obj]
    return obj


def strings_in(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from strings_in(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from strings_in(value)


@dataclass
class Record:
    """One spooled write: where it sits (file, line) and what it does."""

    file: str
    line: int
    time: float
    op: str
    args: dict[str, Any]


class Spool:
    """The spool folder of one sweep, as seen by one process."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    # -- writing (any process of the sweep) ---------------------------------------------------------------

    @property
    def own_file(self) -> Path:
        # Per process, so concurrent trials never interleave partial lines; the pid is read at each write
        # because a forked process must not append to its parent's file.
        return self.folder / f"{socket.gethostname()}-{os.getpid()}.jsonl"

    def append(self, op: str, args: dict[str, Any]) -> None:
        """Keep one write, in order; its run is held from now on (later writes to it join the spool)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if op == "log_artifact":
            args = {**args, "path": self._keep_file(Path(args["path"]))}
        line = json.dumps({"time": time.time(), "op": op, "args": args}, default=str)
        with _LOCK, self.own_file.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        for run_id in (args.get("run_id"), args.get("placeholder")):
            if isinstance(run_id, str):
                self._hold(run_id)

    def _keep_file(self, path: Path) -> str:
        """A copy of an artifact inside the spool (the original may be gone by the time sync runs)."""
        relative = Path("artifacts") / uuid.uuid4().hex / path.name
        (self.folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, self.folder / relative)
        return relative.as_posix()

    def _hold(self, run_id: str) -> None:
        marker = self.folder / "index" / "held" / run_id
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def record_created(self, run_id: str, tags: dict[str, str]) -> None:
        index = self.folder / "index" / "created.jsonl"
        index.parent.mkdir(parents=True, exist_ok=True)
        with _LOCK, index.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"run_id": run_id, "tags": tags}) + "\n")

    # -- ids and holds --------------------------------------------------------------------------------------

    def ids(self) -> dict[str, str]:
        """Placeholder -> real id, for every placeholder a sync has created."""
        return self.progress()["ids"]

    def resolve(self, obj: Any, ids: dict[str, str] | None = None) -> Any:
        ids = self.ids() if ids is None else ids
        return map_strings(obj, lambda s: ids.get(s, s)) if ids else obj

    def unresolved(self, obj: Any) -> bool:
        """Whether `obj` names an experiment or run that exists only in the spool so far."""
        ids = self.ids()
        return any(is_placeholder(s) and s not in ids for s in strings_in(obj))

    def held(self, run_id: str | None) -> bool:
        return bool(run_id) and (self.folder / "index" / "held" / str(run_id)).exists()

    def must_queue(self, args: dict[str, Any]) -> bool:
        """A write joins the spool without trying the server when its run is held or exists only here (a run is
        held under the id it had when spooled: a placeholder stays held after a sync that stopped half-way)."""
        run_id = args.get("run_id")
        return self.unresolved(args) or self.held(run_id) or self.held(self.resolve(run_id))

    def created_run(self, tags: dict[str, str]) -> str | None:
        """The latest run this machine created with all of `tags` (ids compared after resolving placeholders)."""
        index = self.folder / "index" / "created.jsonl"
        if not index.is_file():
            return None
        ids = self.ids()
        wanted = self.resolve(tags, ids)
        found = None
        for entry in _json_lines(index):
            if all(self.resolve(entry["tags"].get(k), ids) == v for k, v in wanted.items()):
                found = entry["run_id"]
        return self.resolve(found, ids)

    # -- reading (sync, and a trial resuming) ---------------------------------------------------------------

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []

    def records(self, skip: dict[str, int] | None = None) -> Iterator[Record]:
        """Every complete line not yet replayed, all files merged in the order the writes were made."""
        skip = skip or {}
        streams = [_records_of(path, skip.get(path.name, 0)) for path in self.files()]
        # Within a file the order is kept as written even if the clock stepped back; across files, by time.
        yield from heapq.merge(*streams, key=lambda record: record.time)

    def pending(self) -> int:
        """How many spooled writes no sync has replayed yet."""
        return sum(1 for _ in self.records(self.progress()["lines"]))

    def metric_steps(self, run_id: str, key: str) -> set[int]:
        """Steps at which `key` was spooled for `run_id` (replayed or not)."""
        steps, ids = set(), self.ids()
        for record in self.records():
            if record.op == "log_batch" and self.resolve(record.args.get("run_id"), ids) == run_id:
                steps |= {int(m[3]) for m in record.args.get("metrics", []) if m[0] == key}
        return steps

    # -- sync's progress ------------------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        path = self.folder / "replayed.json"
        saved = json.loads(path.read_text()) if path.is_file() else {}
        return {"lines": saved.get("lines", {}), "ids": saved.get("ids", {}), "skipped": saved.get("skipped", [])}

    def save_progress(self, progress: dict[str, Any]) -> None:
        # Written after every request, atomically: a sync killed half-way replays nothing twice.
        write_json_atomic(self.folder / "replayed.json", progress, indent=1)

    def release_all(self) -> None:
        """Everything is on the server: writes to these runs may go there directly again."""
        shutil.rmtree(self.folder / "index" / "held", ignore_errors=True)


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.endswith("\n"):
                yield json.loads(line)


def _records_of(path: Path, start: int) -> Iterator[Record]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            # A line without its newline is being written, or its writer died mid-line: not a whole write yet.
            if number < start or not line.endswith("\n"):
                continue
            entry = json.loads(line)
            yield Record(path.name, number, float(entry["time"]), entry["op"], entry["args"])
