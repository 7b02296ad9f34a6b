"""Each validation row's own score at an evaluation, saved beside its checkpoint: two checkpoints scored on the same
rows can then be compared row by row (a paired difference), whose noise is far smaller than two independent
scores' (search/selection/settle.py: the lucky-winner guard)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from finesweep.spaces.files import write_json_atomic

ROW_SCORES_FILE = "row_scores.json"


@dataclass
class RowScores:
    """Per validation row, in the split's own order: its mean loss (per scored token for a causal LM) and, for a
    classifier, whether its prediction was right."""

    loss: list[float] = field(default_factory=list)
    correct: list[float] = field(default_factory=list)

    def save(self, folder: Path) -> None:
        write_json_atomic(Path(folder) / ROW_SCORES_FILE, {"loss": self.loss, "correct": self.correct}, indent=None)

    @classmethod
    def load(cls, folder: Path) -> "RowScores | None":
        """The scores saved in `folder`, or None (none saved: a checkpoint of a data-parallel trial, an older one)."""
        try:
            saved = json.loads((Path(folder) / ROW_SCORES_FILE).read_text())
        except (OSError, ValueError):
            return None
        return cls(loss=list(saved.get("loss", [])), correct=list(saved.get("correct", [])))


class RowCollector:
    """The rows of one evaluation as its batches come (in the evaluated order), put back in the split's order."""

    def __init__(self, order: list[int]):
        self.order = order  # evaluated position -> the row's index in the split (trainer/trial.py: by_length)
        self.loss: list[float] = []
        self.correct: list[float] = []

    def reset(self) -> None:
        self.loss, self.correct = [], []

    def add(self, logits, labels, causal: bool) -> None:
        """One evaluation batch's rows: `logits` and `labels` as the model scored them."""
        import torch

        logits, labels = logits.detach(), labels.detach()
        if causal:  # row by row: a batch's logits in float32 at once would double the evaluation's peak memory
            self.loss.extend(_causal_row_loss(row_logits, row_labels) for row_logits, row_labels in zip(logits, labels))
            return
        logits = logits.float()
        self.loss.extend(float(x) for x in torch.nn.functional.cross_entropy(logits, labels, reduction="none"))
        self.correct.extend(float(x) for x in (logits.argmax(dim=-1) == labels))

    def scores(self) -> "RowScores | None":
        """The evaluation's rows in the split's order; None where they are not every row once (a sharded one)."""
        if len(self.loss) != len(self.order):
            return None
        back = sorted(range(len(self.order)), key=self.order.__getitem__)
        return RowScores(loss=[self.loss[i] for i in back],
                         correct=[self.correct[i] for i in back] if self.correct else [])


def _causal_row_loss(logits, labels) -> float:
    """One row's mean cross-entropy over the tokens it scores: the token at t predicts the label at t + 1, and -100
    marks what carries no loss (NaN where no token does)."""
    import torch

    targets = labels[1:]
    if not bool((targets != -100).any()):
        return math.nan
    return float(torch.nn.functional.cross_entropy(logits[:-1].float(), targets, ignore_index=-100))
