"""The search planned from the probe's measurements, before any trial trains.

From each combination's measured samples/s (training at its micro-batch, and forward-only for evaluation) the plan
knows what an evaluation period costs: `eval_every_steps` optimizer steps at the space's mean effective batch plus
one pass over the validation split. With a time budget that cannot pay for every combination's `max_steps`, the
trials are allotted time, not steps (Hyperband's allocation in seconds): every evaluation period lasts what the
fastest combination's does, a slower combination trains fewer samples in it, and a trial has as many periods as
fit in the budget after its start (stretched to fill it but a margin), so whichever trial starts first trains to
its full length and its learning-rate schedule ends inside the budget (a trial the budget cuts ends at its peak
rate, undertrained), and ASHA compares trials at equal seconds. A step budget shortens the trials to what it pays
for. Then the plan simulates the search (ASHA's rungs and cut-off exactly as Ray applies them, trials of random
quality, `max_concurrent_trials` at once, the budget) to count the trials that can start and evaluate in it, which
become num_trials (never raised), so TPE's random start-up is sized for the trials that will really run. The
simulation also predicts the search's seconds; with the export's estimate, the end time printed before the search.
Pure: no Ray, no MLflow, no model loaded.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from finesweep.search.probe.cadence import planned_cadence
from finesweep.search.probe.dropout_default import resolve_dropout
from finesweep.search.probe.exploit_share import (
    auto_share, leaving_a_first_evaluation, passes_cap_words, sizing_a_capped_winner, sparing_a_capped_winner,
)
from finesweep.search.probe.export_calibration import calibrated
from finesweep.search.probe.export_calibration import note as calibration_note
from finesweep.search.probe.export_time import export_steps
from finesweep.search.probe.padding import length_grouped_megabatch, padded_fraction
from finesweep.search.probe.simulate import TRIAL_START_SECONDS, Lane, Simulated, asha_milestones, simulate
from finesweep.search.probe.table import ProbeResult, attempt_speed
from finesweep.spaces import SweepConfig
from finesweep.spaces.space_config import AUTO_DROPOUT
from finesweep.spaces.search_config import SearchConfig

# Fixed costs the probe does not measure (TRIAL_START_SECONDS: search/probe/simulate.py). A trial's start counts
# the probe's load of the model where it took longer than a small encoder's on a CPU (a QLoRA trial on a GPU took
# about 30 s to its first step: CUDA's start, the 4-bit quantization).
SMALL_MODEL_LOAD_SECONDS = 1.0
RAY_START_SECONDS = 8.0  # a local Ray's start and Tune's set-up before the first trial
# The budget a trial started first may fill: the rest is the margin for the probe's speeds being optimistic (the
# trials' periods came out 5% shorter than planned on the quickstart), so it ends with its last evaluation.
BUDGET_MARGIN = 0.05
TRIALS_COMPARED = 2  # the fewest trials a time budget's plan leaves room for: a search compares (see trial_room)
FORWARD_SPEEDUP = 3.0  # evaluation speed when the probe could not measure it: a forward pass, no backward
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


@dataclass
class SearchPlan:
    """What the plan decided, why, and what it predicts."""

    combinations: list[CombinationTimes]
    eval_every_steps: int
    max_steps: int
    requested_max_steps: int
    num_trials: int
    requested_num_trials: int
    concurrency: int
    budget: str  # in words
    search_seconds: float  # predicted, Ray's start included
    export_steps: dict[str, float]  # predicted, by step (search/probe/export_time.py::export_steps)
    simulated: Simulated  # the median run of the search with the planned settings
    notes: list[str] = field(default_factory=list)
    period_seconds: float | None = None  # allotted in time: every evaluation period lasts this long
    samples_per_evaluation: dict[str, int] = field(default_factory=dict)  # per combination, when allotted in time
    exploitation_seconds: float = 0.0  # after the trials, the winner trains this long (search.exploit)
    exploit_share: float | None = None  # search.exploit.share as planned (auto resolved)
    dropout: Any = AUTO_DROPOUT  # space.dropout as planned (auto resolved: search/probe/dropout_default.py)
    export_calibration: dict[str, Any] = field(default_factory=dict)  # key, ratios applied (export_calibration.py)
    # search.baseline.budget equal: after the search, the baseline recipe trains again for as long as the export
    # trained (search/tuning/equal_time.py); at most the search's budget, which is what this predicts.
    equal_time_seconds: float = 0.0

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

    @property
    def evaluations(self) -> int:
        return self.max_steps // self.eval_every_steps

    @property
    def export_seconds(self) -> float:
        return sum(self.export_steps.values())

    @property
    def predicted_seconds(self) -> float:
        """Seconds from the search's start to the end of the export."""
        return self.search_seconds + self.equal_time_seconds + self.export_seconds

    def to_dict(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "requested_max_steps": self.requested_max_steps,
                "num_trials": self.num_trials, "requested_num_trials": self.requested_num_trials,
                "eval_every_steps": self.eval_every_steps, "concurrency": self.concurrency, "budget": self.budget,
                "search_seconds": round(self.search_seconds, 1), "export_seconds": round(self.export_seconds, 1),
                "export_steps": {step: round(seconds, 1) for step, seconds in self.export_steps.items()},
                "export_calibration": self.export_calibration,
                "exploration_seconds": round(self.search_seconds - self.exploitation_seconds, 1),
                "exploitation_seconds": round(self.exploitation_seconds, 1), "exploit_share": self.exploit_share,
                "equal_time_seconds": round(self.equal_time_seconds, 1),
                "simulated": vars(self.simulated), "notes": self.notes, "period_seconds": self.period_seconds,
                "samples_per_evaluation": self.samples_per_evaluation,
                "combinations": {c.key: {"samples_per_second": round(c.samples_per_second, 2),
                                         "seconds_per_step": round(c.seconds_per_step, 4),
                                         "seconds_per_evaluation": round(c.seconds_per_evaluation, 2),
                                         "steps_per_trial": self.trial_steps(c),
                                         "start_seconds": round(c.start_seconds, 1),
                                         "trial_seconds": round(self.trial_seconds(c), 1)}
                                 for c in self.combinations}}


def combination_times(probes: dict[str, ProbeResult], effective_batches: list[int], validation_rows: int,
                      lengths: dict[str, dict[str, float]] | None = None, train_rows: int = 0,
                      grouped: bool = False) -> list[CombinationTimes]:
    """Per combination the probe could train, its cost per step (at the space's mean effective batch: the sampler
    spreads the trials over the listed sizes) and per evaluation. With the data's token `lengths` (percentiles per
    model) the probe's full-length speeds are scaled to the trials' padded batches (search/probe/padding.py):
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


@dataclass
class Schedule:
    """How long the trials train: evaluations per trial, and the seconds of each period when allotted in time."""

    evaluations: int
    period_seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def planned_schedule(combinations: list[CombinationTimes], max_steps: int, eval_every_steps: int,
                     time_budget: float | None, step_budget: int | None, concurrency: int) -> Schedule:
    """The trials' length. The file's max_steps when the budget pays for it with every combination; under a time
    budget that does not, periods of the fastest combination's length (at least twice the longest evaluation, so
    no combination spends more than half its time evaluating), as many as a trial started first fits after its
    start in its room (trial_room: the budget, or half of it with one trial at a time), stretched to fill that room
    (see _stretched); under a step budget, at most the steps it pays for."""
    evaluations = max_steps // eval_every_steps
    schedule = Schedule(evaluations)
    if time_budget is not None:
        slowest = max(combinations, key=lambda c: c.period_seconds(eval_every_steps))
        start = max(c.start_seconds for c in combinations)
        room, room_words = trial_room(time_budget, concurrency)
        if start + evaluations * slowest.period_seconds(eval_every_steps) > room:
            fastest = min(combinations, key=lambda c: c.period_seconds(eval_every_steps))
            longest_evaluation = max(c.seconds_per_evaluation for c in combinations)
            period = max(fastest.period_seconds(eval_every_steps), 2 * longest_evaluation)
            if room < time_budget and room - start < period:  # two trials do not fit: one, with the whole budget
                room, room_words = time_budget, ""
            fits = int((room - start) // period)
            why = (f"what {fastest.key} takes for {eval_every_steps} steps and its evaluation"
                   if period == fastest.period_seconds(eval_every_steps) else
                   f"twice the longest evaluation, {longest_evaluation:.0f} s")
            stretched = _stretched(period, fastest, fits, evaluations, max_steps, room, start)
            if stretched > period:
                period = stretched
                why += f", stretched to fill {'its room' if room_words else 'the budget'} but {BUDGET_MARGIN:.0%}"
            schedule = Schedule(max(1, min(evaluations, fits)), period)
            periods = f"{schedule.evaluations} evaluation period{'' if schedule.evaluations == 1 else 's'}"
            inside = room_words or "the trials' budget of"
            schedule.notes.append(
                f"trials allotted time: {periods} of {period:.0f} s each ({why}), so a trial started first ends "
                f"inside {inside} {room:.0f} s; {slowest.key} would take "
                f"{slowest.period_seconds(eval_every_steps):.0f} s per {eval_every_steps} steps, and trains fewer "
                "steps in the same time")
            if fits < 1:
                schedule.notes.append(f"the budget does not pay for one evaluation of {fastest.key}: raise "
                                      "search.time_budget_minutes or lower search.eval_every_steps")
    if step_budget is not None and step_budget < schedule.evaluations * eval_every_steps:
        schedule.evaluations = max(1, step_budget // eval_every_steps)
        schedule.notes.append(f"trials shortened to {schedule.evaluations * eval_every_steps} steps: the step budget "
                              f"is {step_budget}")
    return schedule


def trial_room(time_budget: float, concurrency: int) -> tuple[float, str]:
    """The seconds a trial started first may take of the trials' `time_budget`, and the words for it ("" where it
    is the whole budget). A search compares at least TRIALS_COMPARED trials: with that many at once (the tweets
    example's two) a trial may take the whole budget while the others start beside it; with one at a time, a trial
    that filled the budget was the only one (the baseline, which ASHA never stops: the LLM file of
    benchmarks/llm-time-limit/ searched nothing at a budget of any length up to 60 minutes), so it takes its share."""
    if concurrency >= TRIALS_COMPARED:
        return time_budget, ""
    share = concurrency / TRIALS_COMPARED
    at_once = f"{concurrency} trial{'s' if concurrency > 1 else ''} at a time"
    return time_budget * share, (f"its room of {share:.0%} of the trials' budget (with {at_once}, so that "
                                 f"{TRIALS_COMPARED} trials are compared):")


def _stretched(period: float, fastest: CombinationTimes, fits: int, evaluations: int, max_steps: int,
               time_budget: float, start: float) -> float:
    """The period lengthened so that the `fits` periods of a trial started first (after its `start` seconds) fill
    the budget but its margin, where fewer than the file's `evaluations` fit (the fastest combination then still
    trains max_steps at most); else the period as it is."""
    if not 0 < fits < evaluations:
        return period
    filling = (time_budget * (1 - BUDGET_MARGIN) - start) / fits
    ceiling = fastest.seconds_per_evaluation + max_steps * fastest.seconds_per_step / fits
    return max(period, min(filling, ceiling))


def samples_per_evaluation(combinations: list[CombinationTimes], period: float, mean_batch: float) -> dict[str, int]:
    """Per combination, the samples it trains in one period besides its evaluation (at least one mean batch)."""
    return {c.key: max(round(mean_batch), round((period - c.seconds_per_evaluation) * c.samples_per_second))
            for c in combinations}


def _calibrate_export(plan: SearchPlan, calibration: dict[str, Any] | None) -> None:
    """The export's steps multiplied by the ratios this machine's last export of these candidates measured, the
    plan's note saying so; the key and the ratios applied kept for the export to learn from (export_calibration)."""
    if not calibration:
        return
    applied = {step: ratio for step, ratio in calibration["ratios"].items() if step in plan.export_steps}
    plan.export_steps = calibrated(plan.export_steps, applied)
    plan.export_calibration = {"key": calibration["key"], "ratios": applied}
    if applied:
        plan.notes.append(calibration_note(applied))


def plan_search(config: SweepConfig, probes: dict[str, ProbeResult], *, validation_rows: int, test_rows: int,
                seq_len: int, concurrency: int, lengths: dict[str, dict[str, float]] | None = None,
                train_rows: int = 0, export_timed_on_cpu_too: bool = False, export_thread_ratio: float = 1.0,
                export_calibration: dict[str, Any] | None = None) -> SearchPlan | None:
    """The plan for this sweep; None when the probe measured no combination that trains. `lengths`: the data's
    token-length percentiles per model, `train_rows`: the training split's (see combination_times); `export_*`:
    see export_steps; `export_calibration`: this machine's key and measured ratios (export_calibration.py)."""
    search = config.search
    combinations = combination_times(probes, config.space.effective_batch_size, validation_rows, lengths,
                                     train_rows, config.data.group_by_length)
    if not combinations:
        return None
    config, dropout_note = resolve_dropout(config, combinations, train_rows)
    auto_note = ""
    if search.exploit.share == "auto" and search.time_budget_minutes:
        share, auto_note = auto_share(combinations, search.time_budget_minutes * 60, train_rows)
        search = search.model_copy(update={"exploit": search.exploit.model_copy(update={"share": share})})
    search, cadence_notes = planned_cadence(search, combinations, max(c.start_seconds for c in combinations))
    if search.time_budget_minutes:
        search, lowered = leaving_a_first_evaluation(
            search, max(c.start_seconds + c.period_seconds(search.eval_every_steps) for c in combinations))
        auto_note += lowered
    schedule, per_evaluation = _trials_schedule(search, combinations, config.space.effective_batch_size, concurrency)
    fewest = _fewest_trial_samples(schedule, per_evaluation, search.eval_every_steps,
                                   min(config.space.effective_batch_size))
    task = config.data.task
    search, capped_note = sparing_a_capped_winner(search, fewest, train_rows, task)
    sized = ""
    if not capped_note:
        slowest = min(combinations, key=lambda c: c.samples_per_second)
        search, sized = sizing_a_capped_winner(search, fewest, train_rows, slowest, task)
        auto_note += sized
    if capped_note or sized:  # the trials' part grew: longer trials, perhaps more of them
        schedule, per_evaluation = _trials_schedule(search, combinations, config.space.effective_batch_size,
                                                    concurrency)
    time_budget = search.exploration_seconds  # the trials' share: the rest trains the winner (search.exploit)
    plan = SearchPlan(combinations, search.eval_every_steps, schedule.evaluations * search.eval_every_steps,
                      search.max_steps, search.num_trials, search.num_trials, concurrency, _budget_words(config), 0.0,
                      export_steps(config, combinations, test_rows, seq_len, export_timed_on_cpu_too,
                                   export_thread_ratio), Simulated(0.0, 0, 0, 0, 0),
                      cadence_notes + schedule.notes, schedule.period_seconds, per_evaluation)
    _calibrate_export(plan, export_calibration)
    lanes = [Lane(plan.period(c), round(plan.steps_per_evaluation(c)), c.start_seconds) for c in combinations]
    asha = search.asha if search.scheduler == "asha" else None
    milestones = asha_milestones(plan.evaluations, asha.grace_period, asha.reduction_factor) if asha else None

    def runs(num_trials: int) -> list[Simulated]:
        return [simulate(lanes, evaluations=plan.evaluations, num_trials=num_trials, concurrency=concurrency,
                         milestones=milestones, reduction_factor=asha.reduction_factor if asha else 1.0,
                         time_budget=time_budget, step_budget=search.step_budget, seed=seed)
                for seed in range(SIMULATIONS)]

    simulated = runs(search.num_trials)
    # The most trials that started in any simulated run (fewer would idle when ASHA stops more than the median did).
    can_start = max(run.started for run in simulated)
    if search.fit_to_budget and (time_budget or search.step_budget) and can_start < search.num_trials:
        plan.num_trials = can_start
        plan.notes.append(f"num_trials {search.num_trials} -> {can_start}: at most that many trials start and "
                          "evaluate within the budget (simulated), so TPE's random start-up is sized for them")
        simulated = runs(can_start)
    plan.simulated = sorted(simulated, key=lambda run: (run.seconds, run.started))[len(simulated) // 2]
    plan.exploitation_seconds = search.exploit.seconds(search.time_budget_minutes)
    plan.exploit_share = search.exploit.fraction
    plan.dropout = config.space.dropout
    plan.notes += [note for note in (dropout_note, capped_note) if note]
    plan.search_seconds = RAY_START_SECONDS + plan.simulated.seconds + plan.exploitation_seconds
    if plan.exploitation_seconds:
        plan.notes.append(f"the search's budget split: {time_budget:.0f} s for the trials, then "
                          f"{plan.exploitation_seconds:.0f} s for the winner (search.exploit.share "
                          f"{search.exploit.fraction:.2f}{auto_note}; from its "
                          f"{'latest checkpoint' if search.exploit.start == 'checkpoint' else 'step 0'}, with every core"
                          f"{passes_cap_words(search, train_rows, task)})")
    if search.baseline_budget == "equal":
        plan.equal_time_seconds = equal_time_seconds(plan.search_seconds)
        plan.notes.append(f"then up to {plan.equal_time_seconds:.0f} s for the baseline recipe trained again for as "
                          "long as the export trained (search.baseline.budget: equal): the gain at equal time costs "
                          "the search's time twice")
    return plan


def equal_time_seconds(search_seconds: float) -> float:
    """The equal-time baseline's seconds at most: the export's runs train within the search's budget (Ray's start
    aside), and the run starts once more."""
    return max(search_seconds - RAY_START_SECONDS, 0.0) + TRIAL_START_SECONDS


def _trials_schedule(search: SearchConfig, combinations: list[CombinationTimes], effective_batches: list[int],
                     concurrency: int) -> tuple[Schedule, dict[str, int]]:
    """The trials' schedule in the trials' share of the budget, and the samples each combination trains per
    evaluation where they are allotted time (empty where every trial trains search.max_steps)."""
    schedule = Schedule(search.max_steps // search.eval_every_steps)
    if search.fit_to_budget:
        schedule = planned_schedule(combinations, search.max_steps, search.eval_every_steps,
                                    search.exploration_seconds, search.step_budget, concurrency)
    per_evaluation = (samples_per_evaluation(combinations, schedule.period_seconds,
                                             statistics.fmean(effective_batches))
                      if schedule.period_seconds else {})
    return schedule, per_evaluation


def _fewest_trial_samples(schedule: Schedule, per_evaluation: dict[str, int], eval_every_steps: int,
                          smallest_batch: int) -> int:
    """The training samples of the shortest trial that runs to its planned end: allotted time, each combination
    trains its samples per period whatever its batch; else every trial trains its steps, the smallest batch fewest."""
    if per_evaluation:
        return schedule.evaluations * min(per_evaluation.values())
    return schedule.evaluations * eval_every_steps * smallest_batch


def _budget_words(config: SweepConfig) -> str:
    search = config.search
    minutes = search.time_budget_minutes
    # A budget the sweep file wrote (6.5 minutes) as written; one a time limit divided (5.03304 minutes) in seconds.
    parts = [f"{minutes:g} minutes" if round(minutes, 2) == minutes else f"{minutes * 60:.0f} s"] if minutes else []
    parts += [f"{search.step_budget} steps"] if search.step_budget else []
    return " and ".join(parts) or "none"


def apply(config: SweepConfig, plan: SearchPlan) -> SweepConfig:
    """The config with the planned trial length, evaluation cadence and number of trials."""
    exploit = config.search.exploit.model_copy(update={"share": plan.exploit_share}) \
        if plan.exploit_share is not None else config.search.exploit
    search = config.search.model_copy(update={"max_steps": plan.max_steps, "num_trials": plan.num_trials,
                                              "eval_every_steps": plan.eval_every_steps, "exploit": exploit})
    planned_space = plan.dropout != AUTO_DROPOUT
    space = config.space.model_copy(update={"dropout": plan.dropout}) if planned_space else config.space
    return config.model_copy(update={"search": search, "space": space})
