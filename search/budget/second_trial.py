"""A plan that starts one trial searches nothing: the words that say so before anything trains, with the budget that
would start a second one. The LLM file of benchmarks/llm-time-limit/ under `--time-limit 10m` on 2 cores trained
its baseline alone and ended "the search found nothing better", having compared nothing."""

from __future__ import annotations

import math

from finesweep.search.budget.plan import Allowance, PlanInputs, SearchPlan, search_plan
from finesweep.spaces import SweepConfig

# The search budgets tried for a second trial: the planned one times GROWTH^k, up to MAX_FACTOR.
GROWTH, MAX_FACTOR = 1.1, 16.0


def one_trial_warning(config: SweepConfig, inputs: PlanInputs, plan: SearchPlan) -> str | None:
    """The warning for a time-budgeted plan that starts one trial where the file asks for more (None otherwise):
    what that one trial is, and about how many more seconds of search budget a second trial needs
    (second_trial_budget)."""
    search = config.search
    if plan.num_trials != 1 or search.num_trials < 2 or not search.fit_to_budget or not plan.budget_seconds:
        return None
    alone = (", the baseline's (search.baseline), so the search compares nothing and the export is the recipe a user "
             "would run, trained further" if search.baseline != "off" else
             ", the space's centre, so the search compares nothing")
    needed = second_trial_budget(config, inputs, plan)
    more = (f"About {needed - plan.budget_seconds:.0f} s more for the search (search.time_budget_minutes "
            f"{needed / 60:.3g}, or a time limit that much longer) pays for a second trial"
            if needed else f"Not even {MAX_FACTOR:g} times this budget pays for a second trial here")
    if plan.exploit_share:
        more += (", and so may a smaller share for the winner's further training (search.exploit.share, now "
                 f"{plan.exploit_share:.2f})")
    return f"the budget pays for one trial{alone}. {more}."


def second_trial_budget(config: SweepConfig, inputs: PlanInputs, plan: SearchPlan) -> float | None:
    """The least search budget (seconds) of the plan's x GROWTH^k that the plan starts two trials in (None: not
    even MAX_FACTOR times the budget): a bisection over k, as more budget starts no fewer trials."""
    seconds = plan.budget_seconds

    def starts_two(k: int) -> bool:
        return search_plan(config, inputs, Allowance(seconds * GROWTH ** k, plan.export)).num_trials >= 2

    low, high = 0, math.floor(math.log(MAX_FACTOR) / math.log(GROWTH))
    if not starts_two(high):
        return None
    while high - low > 1:  # starts_two(high) holds, starts_two(low) does not
        middle = (low + high) // 2
        low, high = (low, middle) if starts_two(middle) else (middle, high)
    return seconds * GROWTH ** high
