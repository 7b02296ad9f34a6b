"""The training behind each model the comparison with the baseline scores: its samples and its seconds.

A comparison of two models says nothing about their recipes unless it says how long each trained: the export of a
sweep trains for most of the budget, the baseline trial for a trial's share of it. Pure: evaluation histories and the
further training's record in, an arm out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from finesweep.search.selection.equal_samples import History


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: the training samples behind the checkpoint scored, and the seconds the runs behind
    it trained in all (their start and their evaluations included, as a user's stopwatch counts a Trainer run)."""

    samples: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_arm(checkpoint: dict[str, Any], histories: list[History]) -> Arm:
    """A search trial's checkpoint (as Best.as_dict): its samples, and the whole trial's seconds."""
    return Arm(samples(checkpoint), _trial_seconds(histories, checkpoint["trial_id"]))


def export_arm(best: dict[str, Any], exploitation: dict[str, Any] | None, histories: list[History]) -> Arm:
    """The export: a search trial's checkpoint (that trial's seconds), or a checkpoint of the further training
    (search.exploit): the seconds of the trial it went on from, up to the checkpoint it started from (none where it
    started again from step 0), and the further training's."""
    exploitation = exploitation or {}
    for leg in (exploitation.get("second_leg") or {}, exploitation):
        if leg.get("continued") and leg.get("final_trial", best["trial_id"]) == best["trial_id"]:
            batch = int(best["params"]["effective_batch_size"])
            before = 0.0 if leg.get("start") == "scratch" else _seconds_at(
                histories, leg["source_trial"], int(leg["source_step"]) * batch)
            return Arm(samples(best), round(before + float(leg["trained_seconds"]), 1))
    return trial_arm(best, histories)


def samples(checkpoint: dict[str, Any]) -> int:
    """Training samples behind a checkpoint: its step x its effective batch (0 when either is unknown)."""
    return int(checkpoint.get("step") or 0) * int((checkpoint.get("params") or {}).get("effective_batch_size") or 0)


def _trial_seconds(histories: list[History], trial_id: str) -> float:
    """The trial's seconds at its last evaluation (0 where unknown)."""
    history = next((h for h in histories if h.trial_id == trial_id), None)
    return round(history.seconds[-1], 1) if history and history.seconds else 0.0


def _seconds_at(histories: list[History], trial_id: str, at_samples: int) -> float:
    """The trial's seconds at its last evaluation within `at_samples` (its first, where none is within)."""
    history = next((h for h in histories if h.trial_id == trial_id), None)
    if not history or len(history.seconds) != len(history.evaluations) or not history.seconds:
        return 0.0
    within = [second for (seen, _), second in zip(history.evaluations, history.seconds) if seen <= at_samples]
    return within[-1] if within else history.seconds[0]
