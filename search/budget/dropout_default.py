"""space.dropout auto: no dropout for a fine-tune too short to over-fit, the checkpoint's own otherwise. A budget that
shows the model its training split once or twice leaves it under-fitting, and dropout only slows its learning and its
steps (benchmarks/README.md, "Dropout off for a short fine-tune"; recent checkpoints ship without it, Llama's and
ModernBERT's rates are 0). Past two passes the model sees its rows again and the checkpoint's regularisation stays.
Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from finesweep.search.budget.winner import budget_passes
from finesweep.spaces import SweepConfig
from finesweep.spaces.space_config import AUTO_DROPOUT

if TYPE_CHECKING:
    from finesweep.search.budget.speed import CombinationTimes

# Passes over the training split up to which auto trains without dropout (one and two epochs measured).
NO_DROPOUT_MAX_PASSES = 2.0


def planned_passes(config: SweepConfig, combinations: list[CombinationTimes], train_rows: int,
                   budget: float | None) -> float | None:
    """Passes over the training split the sweep may train one model for: the whole `budget` (seconds) at the slowest
    candidate's speed, but no more than the winner's further training stops at (search.exploit.max_epochs) or a trial
    makes, whichever is more; without a budget, a trial's max_steps at the largest effective batch. None: not
    known."""
    search = config.search
    trial_passes = search.max_steps * max(config.space.effective_batch_size) / train_rows if train_rows > 0 else None
    if not budget:
        return trial_passes
    passes = budget_passes(combinations, budget, train_rows)
    # The continuation's cap holds where there is one: a share of the budget, single-process trials (exploit.applies).
    cap = search.exploit.passes(train_rows, config.data.task)
    capped = (search.exploit.fraction > 0 and config.resources.workers_per_trial == 1 and cap
              and trial_passes is not None)
    return min(passes, max(cap, trial_passes)) if passes is not None and capped else passes


def resolve_dropout(config: SweepConfig, combinations: list[CombinationTimes], train_rows: int,
                    budget: float | None) -> tuple[float | None, str]:
    """What space.dropout auto resolves to (0.0, or None for the checkpoint's own), and the plan's sentence that
    says which and why; (None, "") where the file sets the dropout."""
    if config.space.dropout != AUTO_DROPOUT:
        return None, ""
    passes = planned_passes(config, combinations, train_rows, budget)
    if passes is None:
        rate, words = None, "the checkpoint's own (auto: the passes over the training split are not known)"
    elif passes <= NO_DROPOUT_MAX_PASSES:
        rate, words = 0.0, (f"0, none (auto: the budget pays for {passes:.1f} passes over the training split, at most "
                            f"{NO_DROPOUT_MAX_PASSES:g}: a fine-tune this short under-fits, and dropout slows it)")
    else:
        rate, words = None, (f"the checkpoint's own (auto: the budget pays for {passes:.1f} passes over the training "
                             f"split, more than {NO_DROPOUT_MAX_PASSES:g}: its regularisation may matter)")
    return rate, f"dropout {words}; the baseline keeps the checkpoint's"
