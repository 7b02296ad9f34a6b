"""space.dropout auto: resolved by the plan from the passes over the training split the budget pays for."""

from __future__ import annotations

import pytest

from finesweep.search.budget.dropout_default import NO_DROPOUT_MAX_PASSES, planned_passes, resolve_dropout
from finesweep.spaces import SweepConfig
from tests.search.budget.planning import plan_search
from tests.search.budget.test_plan import probe


def _config(space: dict | None = None, **search) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "dropout", "data": {"path": "data.csv", "task": "classification"},
        "models": [{"name": "big", "path": "big"}, {"name": "small", "path": "small"}],
        "space": {"effective_batch_size": [16, 32], "precision": ["fp32"], **(space or {})},
        "search": {"num_trials": 4, "max_concurrent_trials": 2, "eval_every_steps": 10, "max_steps": 100, **search},
    })


PROBES = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}


def _planned(config: SweepConfig, train_rows: int):
    return plan_search(config, PROBES, validation_rows=80, test_rows=40, seq_len=64, concurrency=2,
                                train_rows=train_rows)


def test_auto_trains_without_dropout_where_the_budget_pays_for_two_passes_at_most_and_says_so():
    """5 minutes at the slowest candidate's 24 samples/s: 7,200 samples, 1 pass over 7,200 rows, 3 over 2,400."""
    config = _config(time_budget_minutes=5, exploit={"max_epochs": None})
    assert config.space.dropout == "auto"
    short, long = _planned(config, 7_200), _planned(config, 2_400)
    assert short.auto_dropout == 0.0 and long.auto_dropout is None
    assert any(note.startswith("dropout 0, none (auto: the budget pays for 1.0 passes over the training split")
               and note.endswith("the baseline keeps the checkpoint's") for note in short.notes)
    assert any("the checkpoint's own (auto: the budget pays for 3.0 passes" in note for note in long.notes)
    assert config.space.with_auto_dropout(short.auto_dropout).dropout == 0.0, "the space the trials sample"
    assert config.space.with_auto_dropout(long.auto_dropout).dropout is None, \
        "past two passes: the checkpoint's regularisation"
    assert _planned(config, 0).auto_dropout is None, "rows not known: the checkpoint's own"


def test_without_a_time_budget_auto_counts_a_trials_max_steps_at_the_largest_batch():
    config = _config(max_steps=100)
    assert planned_passes(config, [], 3_200, None) == pytest.approx(1.0)  # 100 steps x 32 rows
    assert _planned(config, 3_200).auto_dropout == 0.0
    assert _planned(config, 3_200 * 2 // 5).auto_dropout is None  # 2.5 passes
    assert NO_DROPOUT_MAX_PASSES == 2.0


@pytest.mark.parametrize("written, kept", [(0.1, 0.1), ("checkpoint", None), ({"low": 0.0, "high": 0.1}, None)])
def test_a_dropout_the_file_sets_is_kept_and_not_explained(written, kept):
    config = _config({"dropout": written}, time_budget_minutes=5)
    assert resolve_dropout(config, [], 7_200, 300.0) == (None, "")
    sampled = config.space.with_auto_dropout(_planned(config, 7_200).auto_dropout)
    assert sampled.dropout == (config.space.dropout if isinstance(written, dict) else kept)


def test_auto_counts_the_passes_one_model_trains_not_the_whole_budgets():
    """5 minutes pay for 3 passes over 2,400 rows, a trial for 1.3 (100 steps of 32), and the winner's further
    training ends at 2 (search.exploit.max_epochs): no model trains past 2 passes, so no dropout. Over 800 rows a trial
    makes 4 passes itself: it counts, and the checkpoint's dropout stays."""
    config = _config(time_budget_minutes=5, exploit={"max_epochs": 2})
    assert planned_passes(config, _planned(config, 2_400).combinations, 2_400, 300.0) == pytest.approx(2.0)
    assert _planned(config, 2_400).auto_dropout == 0.0
    assert planned_passes(config, _planned(config, 800).combinations, 800, 300.0) == pytest.approx(4.0)
    assert _planned(config, 800).auto_dropout is None
    no_share = _config(time_budget_minutes=5, exploit={"share": 0})
    assert planned_passes(no_share, _planned(no_share, 2_400).combinations, 2_400, 300.0) == pytest.approx(3.0)
