"""The search planned from the probe's measurements, before any trial trains.

From each combination's measured samples/s (training at its micro-batch, and forward-only for evaluation) the plan
knows what an evaluation period costs: `eval_every_steps` optimizer steps at the space's mean effective batch plus
one pass over the validation split. It divides the budget between the trials and the winner (winner.py), lays out
the trials' schedule in their part (schedule.py), then simulates the search (ASHA's rungs and cut-off exactly as
Ray applies them, trials of random quality, `max_concurrent_trials` at once, the budget) to count the trials that
can start and evaluate in it, which become num_trials (never raised), so TPE's random start-up is sized for the
trials that will really run. The simulation also predicts the search's seconds; with the export's estimate
(export_time.py), the end time printed before the search. Pure: no Ray, no MLflow, no model loaded.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields, replace
from typing import Any

from finesweep.search.budget.cadence import planned_cadence
from finesweep.search.budget.dropout_default import resolve_dropout
from finesweep.search.budget.export_calibration import calibrated
from finesweep.search.budget.export_calibration import note as calibration_note
from finesweep.search.budget.export_time import export_steps
from finesweep.search.budget.measured import (FORWARD_SPEEDUP, RAY_START_SECONDS, SMALL_MODEL_LOAD_SECONDS,
                                              TRIAL_START_SECONDS)
from finesweep.search.budget.padding import length_grouped_megabatch, padded_fraction
from finesweep.search.budget.simulate import Lane, Simulated, asha_milestones, simulate
from finesweep.search.budget.winner import Split, passes_cap_words, unmeasured_share, winner_share
from finesweep.search.probe.table import ProbeResult, attempt_speed
from finesweep.spaces import SweepConfig
from finesweep.spaces.config import ExportConfig
from finesweep.spaces.search_config import SearchConfig
from finesweep.spaces.grid import grid_trials

SIMULATIONS = 31  # seeded runs of the search; the plan reports their median


@dataclass(frozen=True)
class CombinationTimes:
    """What one model, precision and method costs per step and per evaluation, as the probe measured it."""

    key: str
    samples_per_second: float  # training, at the micro-batch the trials use
    eval_samples_per_second: float
    seconds_per_step: float  # one optimizer step at the space's mean effective batch
    seconds_per_evaluation: float  # one pass over the validation split
    decode_seconds_per_token: float = 0.0  # a causal LM's greedy decoding at batch 1, as the probe measured it
    weight_bytes: int = 0  # the model's float32 weights, as the probe counted them (0: an older cache's answer)
    start_seconds: float = TRIAL_START_SECONDS  # from a trial's launch to its first step

    def period_seconds(self, eval_every_steps: int) -> float:
        """One evaluation period: the steps between two evaluations and the evaluation."""
        return eval_every_steps * self.seconds_per_step + self.seconds_per_evaluation

    @property
    def mean_batch(self) -> float:
        """The space's mean effective batch, in which seconds_per_step is counted."""
        return self.samples_per_second * self.seconds_per_step


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

    def to_dict(self) -> dict[str, Any]:
        """The record for MLflow (plan.json), summary.json and sweep-state.json; from_dict reads it back (its own
        fields unrounded, so exactly)."""
        return {"max_steps": self.max_steps, "requested_max_steps": self.requested_max_steps,
                "num_trials": self.num_trials, "requested_num_trials": self.requested_num_trials,
                "eval_every_steps": self.eval_every_steps, "concurrency": self.concurrency, "budget": self.budget,
                "budget_seconds": self.budget_seconds, "time_limit_seconds": self.time_limit_seconds,
                "elapsed_seconds": self.elapsed_seconds,
                "predicted_wall_seconds": round(self.predicted_wall_seconds, 1),
                "search_seconds": self.search_seconds, "export_seconds": round(self.export_seconds, 1),
                "export_steps": self.export_steps,
                "export": self.export.model_dump(mode="json"), "export_calibration": self.export_calibration,
                "exploration_seconds": round(self.search_seconds - self.exploitation_seconds, 1),
                "exploitation_seconds": self.exploitation_seconds, "exploit_share": self.exploit_share,
                "equal_time_seconds": self.equal_time_seconds, "auto_dropout": self.auto_dropout,
                "simulated": vars(self.simulated), "notes": self.notes, "period_seconds": self.period_seconds,
                "samples_per_evaluation": self.samples_per_evaluation,
                "combinations": {c.key: {**{name: getattr(c, name) for name in COMBINATION_FIELDS},
                                         "steps_per_trial": self.trial_steps(c),
                                         "trial_seconds": round(self.trial_seconds(c), 1)}
                                 for c in self.combinations}}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> SearchPlan:
        """The plan to_dict recorded (a resume goes on with the plan its sweep started with)."""
        combinations = [CombinationTimes(key, **{name: times[name] for name in COMBINATION_FIELDS if name in times})
                        for key, times in record["combinations"].items()]
        own = {f.name: record[f.name] for f in fields(cls)}
        return cls(**{**own, "combinations": combinations, "simulated": Simulated(**record["simulated"]),
                      "export": ExportConfig.model_validate(record["export"])})


# What to_dict keeps of each combination's times (its key is the record's).
COMBINATION_FIELDS = ("samples_per_second", "eval_samples_per_second", "seconds_per_step", "seconds_per_evaluation",
                      "decode_seconds_per_token", "weight_bytes", "start_seconds")


def combination_times(probes: dict[str, ProbeResult], effective_batches: list[int], validation_rows: int,
                      lengths: dict[str, dict[str, float]] | None = None, train_rows: int = 0,
                      grouped: bool = False) -> list[CombinationTimes]:
    """Per combination the probe could train, its cost per step (at the space's mean effective batch: the sampler
    spreads the trials over the listed sizes) and per evaluation. With the data's token `lengths` (percentiles per
    model) the probe's full-length speeds are scaled to the trials' padded batches (search/budget/padding.py):
    random ones, or `grouped` by length from the `train_rows` and validation_rows."""
    mean_batch = statistics.fmean(effective_batches)
    times = []
    for key, result in sorted(probes.items()):
        speed = result.samples_per_second
        if speed <= 0 or result.too_slow:
            continue
        eval_speed = _eval_samples_per_second(result) or FORWARD_SPEEDUP * speed
        if lengths and result.model in lengths:
            step_rows = max(result.micro_batch, round(mean_batch))
            eval_batch = result.eval_batch_size or result.micro_batch  # what a trial evaluates with
            train_sorted = length_grouped_megabatch(train_rows, step_rows) if grouped and train_rows else None
            eval_sorted = length_grouped_megabatch(validation_rows, eval_batch) if grouped and validation_rows else None
            speed /= padded_fraction(lengths[result.model], result.micro_batch, result.seq_len, train_sorted)
            eval_speed /= padded_fraction(lengths[result.model], eval_batch, result.seq_len, eval_sorted)
        start = TRIAL_START_SECONDS + max(result.load_seconds - SMALL_MODEL_LOAD_SECONDS, 0.0)
        times.append(CombinationTimes(key, speed, eval_speed, mean_batch / speed, validation_rows / eval_speed,
                                      result.decode_seconds_per_token, result.weight_bytes, start))
    return times


def _eval_samples_per_second(result: ProbeResult) -> float:
    return max((attempt_speed(a) for a in result.attempts if a.get("mode") == "eval" and not a.get("error")),
               default=0.0)


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


def plan_search(config: SweepConfig, probes: dict[str, ProbeResult], **measured: Any) -> SearchPlan | None:
    """The plan for this sweep from the probe's answers (plan_inputs' arguments); None when the probe measured no
    combination that trains."""
    inputs = plan_inputs(config, probes, **measured)
    return search_plan(config, inputs) if inputs else None


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
    where fewer fit (never raised); the median run at that number; and the note where it was lowered."""
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
    return num_trials, sorted(simulated, key=lambda run: (run.seconds, run.started))[len(simulated) // 2], note


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
