"""`finesweep sync`: replay a sweep's tracking spool (spool.py) to the server, in order, once it answers again.

Apart from the spool so that the two import one way: the client spools (client -> spool), sync replays through the
client (sync -> client, spool).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from finesweep.search.tracking.client import Tracker, TrackingUnavailable, apply_op
from finesweep.search.tracking.spool import Record, Spool, is_placeholder, map_strings, strings_in
from finesweep.spaces.files import write_json_atomic


@dataclass
class ReplayReport:
    """What one sync did."""

    replayed: Counter = field(default_factory=Counter)  # op -> count
    created: dict[str, str] = field(default_factory=dict)  # placeholder -> real id, made by this sync
    skipped: list[str] = field(default_factory=list)  # "file:line op: why", for lines the server refused
    remaining: int = 0


def replay(folder: Path, uri: str) -> ReplayReport:
    """Send every pending line to `uri`, in order. Raises TrackingUnavailable (progress kept) if the server does
    not answer; a line the server refuses for good (say, its run was deleted) is skipped and reported."""
    spool, report = Spool(folder), ReplayReport()
    progress = spool.progress()
    tracker = Tracker(uri)  # no spool of its own: a failure must stop the sync, not spool again
    try:
        for group in _batches(spool.records(progress["lines"])):
            _replay_one(group, tracker, spool, progress, report)
            for record in group:
                progress["lines"][record.file] = record.line + 1
            spool.save_progress(progress)
    except TrackingUnavailable:
        report.remaining = spool.pending()
        raise
    if spool.pending() == 0:
        spool.release_all()
    return report


MAX_BATCH_METRICS = 1000  # MLflow's log_batch limit


def _metrics_only(record: Record) -> bool:
    return record.op == "log_batch" and set(record.args) == {"run_id", "metrics"}


def _batches(records: Iterator[Record]) -> Iterator[list[Record]]:
    """The records in order, consecutive metric-only batches of one run grouped: one request replays them all
    (a trial's training-loss rows and evaluations would otherwise cost a request each)."""
    group: list[Record] = []
    for record in records:
        joins = (group and _metrics_only(record) and _metrics_only(group[0])
                 and record.args["run_id"] == group[0].args["run_id"]
                 and sum(len(r.args["metrics"]) for r in group) + len(record.args["metrics"]) <= MAX_BATCH_METRICS)
        if group and not joins:
            yield group
            group = []
        group.append(record)
    if group:
        yield group


def _replay_one(group: list[Record], tracker, spool: Spool, progress: dict[str, Any], report: ReplayReport) -> None:
    first = group[0]
    args = first.args if len(group) == 1 else {**first.args, "metrics": [m for r in group for m in r.args["metrics"]]}
    args = map_strings(args, lambda s: progress["ids"].get(s, s))
    own = args.get("placeholder")  # a run created here carries its own placeholder as a tag
    if any(is_placeholder(s) and s != own for s in strings_in(args)):
        why = "names an experiment or run whose creation is not in this spool"
    else:
        try:
            result = tracker.call(lambda: apply_op(tracker.client, first.op, args, spool.folder))
        except TrackingUnavailable:
            raise
        except Exception as error:  # the server answered and refused: retrying would change nothing
            why = f"{type(error).__name__}: {error}"
        else:
            if own:
                progress["ids"][own] = report.created[own] = result
            report.replayed[first.op] += len(group)
            return
    for record in group:
        report.skipped.append(f"{record.file}:{record.line + 1} {record.op}: {why}")
        progress["skipped"].append(report.skipped[-1])


def remap_sweep_files(root: Path, ids: dict[str, str]) -> list[str]:
    """Placeholders that `run` wrote into the sweep's own files (its state, its summary) become the real ids,
    so `status`, `resume` and `ui` find the runs. Returns the files changed."""
    changed = []
    for name in ("sweep-state.json", "summary.json"):
        path = root / name
        if not path.is_file() or not ids:
            continue
        before = json.loads(path.read_text())
        after = map_strings(before, lambda s: ids.get(s, s))
        if after != before:
            write_json_atomic(path, after, indent=1 if name == "sweep-state.json" else 2)
            changed.append(name)
    return changed
