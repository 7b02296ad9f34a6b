"""Each validation row's own score, put back in the split's order (trainer/row_scores.py)."""

from __future__ import annotations

import math

import pytest
import torch

from finesweep.trainer.row_scores import RowCollector, RowScores


def test_a_causal_rows_loss_is_its_scored_tokens_mean_cross_entropy_and_rows_return_to_the_splits_order(tmp_path):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    labels = torch.tensor([[-100, 1, 2, 3, -100], [-100, -100, 4, 5, 6], [-100, -100, -100, -100, -100]])
    collector = RowCollector(order=[2, 0, 1])  # evaluated rows 0, 1, 2 are the split's rows 2, 0, 1
    collector.add(logits, labels, causal=True)
    manual = []
    for row in range(3):
        pairs = [(logits[row, t], labels[row, t + 1]) for t in range(4) if labels[row, t + 1] != -100]
        manual.append(sum(float(torch.nn.functional.cross_entropy(l[None], y[None])) for l, y in pairs) / len(pairs)
                      if pairs else math.nan)
    scores = collector.scores()
    assert scores.loss[2] == pytest.approx(manual[0]) and scores.loss[0] == pytest.approx(manual[1])
    assert math.isnan(scores.loss[1]) and scores.correct == [], "a row with no scored token has no loss"
    scores.save(tmp_path)
    again = RowScores.load(tmp_path)
    assert again.loss[:1] == pytest.approx(scores.loss[:1]) and RowScores.load(tmp_path / "none") is None


def test_a_classifiers_rows_say_whether_each_was_right_and_a_partial_evaluation_has_none():
    collector = RowCollector(order=[1, 0])
    collector.add(torch.tensor([[2.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0]), causal=False)
    assert collector.scores().correct == [0.0, 1.0]
    collector.reset()
    collector.add(torch.tensor([[2.0, 0.0]]), torch.tensor([0]), causal=False)
    assert collector.scores() is None, "one row of two: not every row once"
