"""The lucky-winner guard on losses: two checkpoints' row scores paired row by row (search/selection/settle.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from finesweep.search.selection.best import Best
from finesweep.search.selection.settle import paired_noise, tied_leader
from finesweep.trainer.row_scores import RowScores


class _Checkpoint:
    def __init__(self, path: Path):
        self.path = str(path)


class _Trial:
    """A trial with one kept checkpoint in `folder`, evaluated at step 10 to `value` of `metric`."""

    config = {"model": "m"}

    def __init__(self, trial: str, folder: Path, metric: str, value: float):
        self.metrics = {"trial_id": trial}
        self.best_checkpoints = [(_Checkpoint(folder), {"trial_id": trial, "step": 10, metric: value})]


def _checkpoint(folder: Path, losses: list[float]) -> Path:
    folder.mkdir(parents=True)
    RowScores(loss=losses).save(folder)
    return folder


def _best(trial: str, folder: Path, metric: str, value: float) -> Best:
    return Best(trial, 10, metric, value, {"model": "m"}, folder, None)


def test_rows_both_leaders_find_hard_alike_make_a_small_lead_real_and_a_noisy_one_a_tie(tmp_path):
    """64 conversations whose losses spread from 1 to 4: b scores every row 0.02 worse (give or take 0.005). Two
    independent standard errors (0.1 each) would call the 0.02 lead a tie; paired, it is four standard errors. Where
    b is as often better as worse by 0.3, the same lead is a tie."""
    rng = random.Random(0)
    hard = [rng.uniform(1.0, 4.0) for _ in range(64)]
    a = _checkpoint(tmp_path / "a", hard)
    b = _checkpoint(tmp_path / "b", [x + 0.02 + rng.uniform(-0.005, 0.005) for x in hard])
    mean_a, mean_b = sum(hard) / 64, sum(RowScores.load(b).loss) / 64
    pick = _best("a", a, "eval_loss", mean_a)
    noise = paired_noise(pick, _best("b", b, "eval_loss", mean_b))
    assert 0 < noise < (mean_b - mean_a) / 3
    assert tied_leader(pick, [_Trial("a", a, "eval_loss", mean_a), _Trial("b", b, "eval_loss", mean_b)], "min",
                       64) is None, "a lead beyond the paired noise"
    c = _checkpoint(tmp_path / "c", [x + 0.02 + rng.choice((-0.3, 0.3)) for x in hard])
    mean_c = sum(RowScores.load(c).loss) / 64
    tie = tied_leader(pick, [_Trial("a", a, "eval_loss", mean_a), _Trial("c", c, "eval_loss", mean_c)], "min", 64)
    assert tie is not None and tie[0].trial_id == "c" and tie[1] == pytest.approx(0.3 / 8, rel=0.2)


def test_a_perplexitys_noise_is_its_losss_scaled_and_missing_or_mismatched_rows_give_none(tmp_path):
    a = _checkpoint(tmp_path / "a", [1.0, 2.0, 3.0, 4.0])
    b = _checkpoint(tmp_path / "b", [1.1, 1.9, 3.2, 3.9])
    loss = paired_noise(_best("a", a, "eval_loss", 2.5), _best("b", b, "eval_loss", 2.525))
    perplexity = paired_noise(_best("a", a, "eval_perplexity", 12.0), _best("b", b, "eval_perplexity", 12.3))
    assert perplexity == pytest.approx(loss * (12.0 * 12.3) ** 0.5)
    assert paired_noise(_best("a", a, "eval_loss", 2.5), _best("x", tmp_path / "none", "eval_loss", 2.6)) is None
    short = _checkpoint(tmp_path / "short", [1.0, 2.0, 3.0])
    assert paired_noise(_best("a", a, "eval_loss", 2.5), _best("s", short, "eval_loss", 2.0)) is None
    assert paired_noise(_best("a", a, "eval_f1_macro", 0.5), _best("b", b, "eval_f1_macro", 0.5)) is None
