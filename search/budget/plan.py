"""The search planned from the probe's measurements, before any trial trains, in one ordered allocation
(search_plan): the dropout auto resolves to, the budget divided between the trials and the winner with the trials'
schedule (winner.py, schedule.py), the export's estimate (export_time.py), and the trials that start and evaluate in
their part, counted by simulating the search as Ray runs it (simulate.py). The result is the frozen SearchPlan every
consumer reads. Pure: no Ray, no MLflow, no model loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from finesweep.search.budget.dropout_default import resolve_dropout
from finesweep.search.budget.export_calibration import calibrated
from finesweep.search.budget.export_calibration import note as calibration_note
from finesweep.search.budget.export_time import export_steps
from finesweep.search.budget.measured import RAY_START_SECONDS, TRIAL_START_SECONDS
from finesweep.search.budget.schedule import planned_cadence
from finesweep.search.budget.simulate import Lane, Simulated, asha_milestones, simulate
from finesweep.search.budget.speed import CombinationTimes, combination_times
from finesweep.search.budget.winner import Split, passes_cap_words, unmeasured_share, winner_share
from finesweep.search.probe.table import ProbeResult
from finesweep.spaces import SweepConfig
from finesweep.spaces.config import ExportConfig
from finesweep.spaces.search_config import SearchConfig
from finesweep.spaces.space_config import SpaceConfig
from finesweep.spaces.grid import grid_trials

SIMULATIONS = 31  # seeded runs of the search; the plan reports their median


@dataclass(frozen=True)
class SearchPlan:
    """What the plan decided, beside what the sweep file asked (requested_*), why (notes), and what it predicts. The
    one record of time every consumer reads: the trials, Tune's stoppers and scheduler, the winner's training, the
    export, the console, MLflow and a resume (to_dict and from_dict)."""

    combinations: list[CombinationTimes]
    eval_every_steps: int
    max_steps: int
    requested_max_steps: int
    num_trials: int
    requested_num_trials: int
    concurrency: int
    budget: str  # in words
    search_seconds: float  # predicted, Ray's start included
    export_steps: dict[str, float]  # predicted, by step (search/budget/export_time.py::export_steps)
    simulated: Simulated  # the median run of the search with the planned settings
    notes: list[str] = field(default_factory=list)
    period_seconds: float | None = None  # allotted in time: every evaluation period lasts this long
    samples_per_evaluation: dict[str, int] = field(default_factory=dict)  # per combination, when allotted in time
    exploitation_seconds: float = 0.0  # after the trials, the winner trains this long (search.exploit)
    exploit_share: float = 0.0  # of the search's budget, for the winner (search.exploit.share, auto resolved)
    # What space.dropout auto resolved to (search/budget/dropout_default.py): 0.0, or None for the checkpoint's own
    # (also where the file sets the dropout: the space holds it; SpaceConfig.with_auto_dropout reads both).
    auto_dropout: float | None = None
    export_calibration: dict[str, Any] = field(default_factory=dict)  # key, ratios applied (export_calibration.py)
    # search.baseline.budget equal: after the search, the baseline recipe trains again for as long as the export
    # trained (search/tuning/equal_time.py); at most the search's budget, which is what this predicts.
    equal_time_seconds: float = 0.0
    budget_seconds: float | None = None  # the search's, trials and winner (None: no time budget)
    export: ExportConfig = field(default_factory=ExportConfig)  # as it will run (limit.py may lighten the file's)
    elapsed_seconds: float = 0.0  # the command's seconds before the search: data and probe
    time_limit_seconds: float | None = None  # search.time_limit, which bounds the whole command
    # Per method, the learning-rate range its trials sample where the range test narrowed the file's
    # (search/range_test.py): method -> [low, high]; sampled_space reads it.
    learning_rates: dict[str, list[float]] = field(default_factory=dict)

    def sampled_space(self, space: SpaceConfig) -> SpaceConfig:
        """The space as the trials sample it: dropout auto resolved, the learning rates the range test narrowed."""
        return space.with_auto_dropout(self.auto_dropout).with_learning_rates(self.learning_rates)

    def steps_per_evaluation(self, times: CombinationTimes) -> float:
        """Optimizer steps between evaluations at the space's mean effective batch."""
        if times.key in self.samples_per_evaluation:
            return self.samples_per_evaluation[times.key] / times.mean_batch
        return self.eval_every_steps

    def trial_steps(self, times: CombinationTimes) -> int:
        return round(self.evaluations * self.steps_per_evaluation(times))

    def period(self, times: CombinationTimes) -> float:
        """Seconds from one evaluation to the next: the steps between them and the evaluation."""
        return self.steps_per_evaluation(times) * times.seconds_per_step + times.seconds_per_evaluation

    def trial_seconds(self, times: CombinationTimes) -> float:
        return times.start_seconds + self.evaluations * self.period(times)

    def times(self, key: str) -> CombinationTimes | None:
        """The combination's times (None: the plan measured none for it)."""
        return next((c for c in self.combinations if c.key == key), None)

    @property
    def evaluations(self) -> int:
        return max(1, self.max_steps // self.eval_every_steps)

    @property
    def trials_seconds(self) -> float | None:
        """The trials' part of the search's budget (None: no time budget)."""
        return self.budget_seconds - self.exploitation_seconds if self.budget_seconds else None

    @property
    def export_seconds(self) -> float:
        return sum(self.export_steps.values())

    @property
    def predicted_seconds(self) -> float:
        """Seconds from the search's start to the end of the export."""
        return self.search_seconds + self.equal_time_seconds + self.export_seconds

    @property
    def predicted_wall_seconds(self) -> float:
        """Seconds from the command's start to the end of the export."""
        return self.elapsed_seconds + self.predicted_seconds

    def winner_seconds(self, trials_took: float | None) -> float:
        """The winner's seconds once the trials ended: the budget less what they took (less than their part where
        they ended early). `trials_took` None (they ran before a resume, their wall time unknown): its share."""
        if trials_took is None:
            return self.exploitation_seconds
        return max(0.0, self.budget_seconds - trials_took)

    def to_dict(self) -> dict[str, Any]:
        """The record for MLflow (plan.json), summary.json and sweep-state.json: its fields, exactly (from_dict reads
        them back), and what they predict, rounded."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "simulated": vars(self.simulated), "export": self.export.model_dump(mode="json"),
                "predicted_wall_seconds": round(self.predicted_wall_seconds, 1),
                "export_seconds": round(self.export_seconds, 1),
                "exploration_seconds": round(self.search_seconds - self.exploitation_seconds, 1),
                "combinations": {c.key: {**{name: getattr(c, name) for name in COMBINATION_FIELDS},
                                         "steps_per_trial": self.trial_steps(c),
                                         "trial_seconds": round(self.trial_seconds(c), 1)}
                                 for c in self.combinations}}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> SearchPlan:
        """The plan to_dict recorded (a resume goes on with the plan its sweep started with)."""
        combinations = [CombinationTimes(key, **{name: times[name] for name in COMBINATION_FIELDS if name in times})
                        for key, times in record["combinations"].items()]
        own = {f.name: record[f.name] for f in fields(cls) if f.name in record}  # a field added since: its default
        return cls(**{**own, "combinations": combinations, "simulated": Simulated(**record["simulated"]),
                      "export": ExportConfig.model_validate(record["export"])})


# What to_dict keeps of each combination's times (its key is the record's).
COMBINATION_FIELDS = tuple(f.name for f in fields(CombinationTimes) if f.name != "key")


@dataclass(frozen=True)
class PlanInputs:
    """What the plan is computed from besides the sweep file: the probe's combination times and the counts and
    settings of this machine and data the export's estimate needs."""

    combinations: list[CombinationTimes]
    concurrency: int
    train_rows: int
    test_rows: int
    seq_len: int
    cuda: bool = False  # a CUDA machine: the export times every variant on the GPU and on the CPU (export_steps)
    export_thread_ratio: float = 1.0
    export_calibration: dict[str, Any] | None = None  # this machine's key and measured ratios (export_calibration.py)
    elapsed_seconds: float = 0.0  # the command's seconds before the search: data and probe
    grid_size: int | None = None  # a grid search's distinct configurations (spaces/grid.py), which cap its trials


def plan_inputs(config: SweepConfig, probes: dict[str, ProbeResult], *, validation_rows: int, test_rows: int,
                seq_len: int, concurrency: int, lengths: dict[str, dict[str, float]] | None = None,
                train_rows: int = 0, cuda: bool = False, export_thread_ratio: float = 1.0,
                export_calibration: dict[str, Any] | None = None, elapsed_seconds: float = 0.0,
                grid_size: int | None = None) -> PlanInputs | None:
    """The plan's inputs from the probe's answers; None when the probe measured no combination that trains.
    `lengths`: the data's token-length percentiles per model, `train_rows`: the training split's (see
    combination_times)."""
    combinations = combination_times(probes, config.space.effective_batch_size, validation_rows, lengths,
                                     train_rows, config.data.group_by_length)
    if not combinations:
        return None
    return PlanInputs(combinations, concurrency, train_rows, test_rows, seq_len, cuda,
                      export_thread_ratio, export_calibration, elapsed_seconds, grid_size)


@dataclass(frozen=True)
class Allowance:
    """What the sweep gives the search and the export before the plan divides it: the search's seconds (None: no
    time budget) and the export as it will run, with the words for how a time limit was divided (limit.py)."""

    seconds: float | None
    export: ExportConfig
    division: str = ""


def file_allowance(config: SweepConfig) -> Allowance:
    """What the sweep file gives: search.time_budget_minutes and its export section (auto as it stands untrimmed)."""
    minutes = config.search.time_budget_minutes
    return Allowance(minutes * 60 if minutes else None, config.export.resolved())


def export_estimate(config: SweepConfig, inputs: PlanInputs,
                    export: ExportConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """The seconds by step (export_steps) of `export`, multiplied by the ratios this machine's last export of these
    candidates measured; and the key and the ratios applied, kept for the export to learn from (empty: none)."""
    steps = export_steps(config, inputs.combinations, inputs.test_rows, inputs.seq_len, inputs.cuda,
                         inputs.export_thread_ratio, export)
    if not inputs.export_calibration:
        return steps, {}
    applied = {step: ratio for step, ratio in inputs.export_calibration["ratios"].items() if step in steps}
    return calibrated(steps, applied), {"key": inputs.export_calibration["key"], "ratios": applied}


def budget_split(config: SweepConfig, inputs: PlanInputs, seconds: float | None) -> Split:
    """The search's `seconds` divided between the trials and the winner, with the trials' cadence and schedule in
    their part (winner.py)."""
    return winner_share(config.search, seconds, inputs.combinations, inputs.train_rows, config.data.task,
                        config.space.effective_batch_size, inputs.concurrency,
                        continues=config.resources.workers_per_trial == 1)


def search_plan(config: SweepConfig, inputs: PlanInputs, allowance: Allowance | None = None) -> SearchPlan:
    """The plan for this sweep, in order: the dropout auto resolves to, the `allowance`'s seconds split between
    the trials and the winner with the trials' schedule (budget_split), the export's estimate, the trials' number
    (trial_count), and the seconds they predict. `allowance`: what a time limit left (limit.py); None: the file's.
    `config` is read, never written."""
    search = config.search
    allowance = allowance or file_allowance(config)
    budget = allowance.seconds
    auto_dropout, dropout_note = resolve_dropout(config, inputs.combinations, inputs.train_rows, budget)
    split = budget_split(config, inputs, budget)
    export, calibration = export_estimate(config, inputs, allowance.export)
    laid_out = SearchPlan(inputs.combinations, split.eval_every_steps,
                          split.schedule.evaluations * split.eval_every_steps, search.max_steps, search.num_trials,
                          search.num_trials, inputs.concurrency, _budget_words(search, budget), 0.0, export,
                          Simulated(0.0, 0, 0, 0, 0), [], split.schedule.period_seconds, split.samples_per_evaluation,
                          split.winner_seconds(budget), split.share, auto_dropout, calibration, budget_seconds=budget,
                          export=allowance.export, elapsed_seconds=inputs.elapsed_seconds,
                          time_limit_seconds=search.time_limit_seconds)
    wanted, grid_note = _wanted_trials(search, inputs.grid_size)
    num_trials, simulated, count_note = trial_count(laid_out, search, split.trials_seconds(budget), wanted)
    search_seconds = RAY_START_SECONDS + simulated.seconds + laid_out.exploitation_seconds
    equal_time = equal_time_seconds(search_seconds) if search.baseline_budget == "equal" else 0.0
    notes = [grid_note, *split.cadence_notes, *split.schedule.notes,
             calibration_note(calibration["ratios"]) if calibration.get("ratios") else "", count_note, dropout_note,
             split.spared_note, _split_words(config, split, budget, inputs.train_rows),
             _equal_time_words(equal_time), allowance.division]
    return replace(laid_out, num_trials=num_trials, simulated=simulated, search_seconds=search_seconds,
                   equal_time_seconds=equal_time, notes=[note for note in notes if note])


def trial_count(plan: SearchPlan, search: SearchConfig, trials_seconds: float | None,
                wanted: int) -> tuple[int, Simulated, str]:
    """The trials that can start and evaluate in their seconds (or the step budget), simulated SIMULATIONS times:
    the `wanted` ones (the file's num_trials, a grid's size at most), lowered to the most that started in any run
    where fewer fit (never raised); the median run at that number (by trials started, then seconds); and the note
    where it was lowered."""
    lanes = [Lane(plan.period(c), round(plan.steps_per_evaluation(c)), c.start_seconds) for c in plan.combinations]
    asha = search.asha if search.scheduler == "asha" else None
    milestones = asha_milestones(plan.evaluations, asha.grace_period, asha.reduction_factor) if asha else None

    def runs(num_trials: int) -> list[Simulated]:
        return [simulate(lanes, evaluations=plan.evaluations, num_trials=num_trials, concurrency=plan.concurrency,
                         milestones=milestones, reduction_factor=asha.reduction_factor if asha else 1.0,
                         time_budget=trials_seconds, step_budget=search.step_budget, seed=seed)
                for seed in range(SIMULATIONS)]

    num_trials, note = wanted, ""
    simulated = runs(num_trials)
    # The most trials that started in any simulated run (fewer would idle when ASHA stops more than the median did).
    can_start = max(run.started for run in simulated)
    if search.fit_to_budget and (trials_seconds or search.step_budget) and can_start < num_trials:
        note = (f"num_trials {num_trials} -> {can_start}: at most that many trials start and evaluate within the "
                "budget (simulated), so TPE's random start-up is sized for them")
        num_trials, simulated = can_start, runs(can_start)
    return num_trials, sorted(simulated, key=lambda run: (run.started, run.seconds))[len(simulated) // 2], note


def _split_words(config: SweepConfig, split: Split, budget: float | None, train_rows: int) -> str:
    """The plan's sentence for the budget's split ("" where the winner gets no seconds)."""
    winner = split.winner_seconds(budget)
    if not winner:
        return ""
    exploit = config.search.exploit
    return (f"the search's budget split: {split.trials_seconds(budget):.0f} s for the trials, then {winner:.0f} s for "
            f"the winner (search.exploit.share {split.share:.2f}{split.share_words}; from its "
            f"{'latest checkpoint' if exploit.start == 'checkpoint' else 'step 0'}, with every core"
            f"{passes_cap_words(config.search, train_rows, config.data.task)})")


def _equal_time_words(seconds: float) -> str:
    if not seconds:
        return ""
    return (f"then up to {seconds:.0f} s for the baseline recipe trained again for as long as the export trained "
            "(search.baseline.budget: equal): the gain at equal time costs the search's time twice")


def equal_time_seconds(search_seconds: float) -> float:
    """The equal-time baseline's seconds at most: the export's runs train within the search's budget (Ray's start
    aside), and the run starts once more."""
    return max(search_seconds - RAY_START_SECONDS, 0.0) + TRIAL_START_SECONDS


def _wanted_trials(search: SearchConfig, grid_size: int | None) -> tuple[int, str]:
    """The trials the file asks for: search.num_trials, a grid's size at most (spaces/grid.py), with its note."""
    return grid_trials(search.num_trials, grid_size) if grid_size else (search.num_trials, "")


def _budget_words(search: SearchConfig, seconds: float | None) -> str:
    # A budget the sweep file wrote (6.5 minutes) as written; one a time limit divided (301.98 s) in seconds.
    minutes = seconds / 60 if seconds else None
    parts = [f"{minutes:g} minutes" if round(minutes, 2) == minutes else f"{seconds:.0f} s"] if minutes else []
    parts += [f"{search.step_budget} steps"] if search.step_budget else []
    return " and ".join(parts) or "none"


def unplanned(config: SweepConfig, concurrency: int, elapsed_seconds: float = 0.0,
              grid_size: int | None = None) -> SearchPlan:
    """The plan where the probe measured no combination that trains: the sweep file's settings as written, with
    what a time limit leaves after the data and the probe for the search, and auto's fixed share for the winner
    where it can train further. It predicts nothing."""
    search = config.search
    limit = search.time_limit_seconds
    budget = max(limit - elapsed_seconds, 1.0) if limit else file_allowance(config).seconds
    share = unmeasured_share(search, budget, continues=config.resources.workers_per_trial == 1)
    auto_dropout, _ = resolve_dropout(config, [], 0, budget)
    wanted, grid_note = _wanted_trials(search, grid_size)
    every, _ = planned_cadence(search.eval_every_steps, search.max_steps, None, [])
    return SearchPlan([], every, search.max_steps, search.max_steps, wanted, search.num_trials,
                      concurrency, _budget_words(search, budget), 0.0, {}, Simulated(0.0, 0, 0, 0, 0),
                      [note for note in (grid_note, "the probe measured no combination that trains: the sweep file's "
                                                    "settings, unplanned") if note],
                      exploitation_seconds=share * budget if budget else 0.0, exploit_share=share,
                      auto_dropout=auto_dropout, budget_seconds=budget, export=config.export.resolved(),
                      elapsed_seconds=elapsed_seconds, time_limit_seconds=limit)


def recorded_plan(record: dict[str, Any], config: SweepConfig) -> SearchPlan:
    """The plan a sweep started with, from its record (SearchPlan.to_dict). An older record, beside a config into
    which the plan's decisions were written (trial length, number, budget, share, dropout), is read back from that
    config, with the record's allotted times and export estimate."""
    if "budget_seconds" in record:
        return SearchPlan.from_dict(record)
    combinations = [CombinationTimes(key, times["samples_per_second"], 0.0, times["seconds_per_step"],
                                     times["seconds_per_evaluation"],
                                     start_seconds=times.get("start_seconds", TRIAL_START_SECONDS))
                    for key, times in (record.get("combinations") or {}).items()]
    return replace(unplanned(config, record.get("concurrency", 1)), combinations=combinations, notes=[],
                   samples_per_evaluation=record.get("samples_per_evaluation") or {},
                   period_seconds=record.get("period_seconds"), export_steps=record.get("export_steps") or {},
                   export_calibration=record.get("export_calibration") or {},
                   exploitation_seconds=record.get("exploitation_seconds", 0.0))


# The search budgets tried for a second trial where the plan starts one: the planned one times GROWTH^k, up to
# MAX_FACTOR.
GROWTH, MAX_FACTOR = 1.1, 16.0


def one_trial_warning(config: SweepConfig, inputs: PlanInputs, plan: SearchPlan) -> str | None:
    """The warning for a time-budgeted plan that starts one trial where the file asks for more, which searches
    nothing (None otherwise): what that one trial is, and about how many more seconds a second trial needs."""
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
