"""What every trial of a sweep shares, and one trial's recipe built from Optuna's sample and that context.

Plain data only (the sweep as a dict, paths, run ids), never the controller's objects, so a trial builds the same
plan in a local Ray and on a cluster's workers, in a single process or on each data-parallel rank.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from finesweep.search.budget.plan import SearchPlan
from finesweep.search.probe.table import combination_key
from finesweep.spaces import SweepConfig
from finesweep.spaces.space import BASELINE_KEY
from finesweep.trainer.trial import TrialPlan, plan_batches

# In a continuation's config (search/tuning/exploit.py): its source is the baseline trial, whose word embeddings train.
CONTINUES_BASELINE_KEY = "continues_baseline"
# In the equal-time run's config (search/tuning/equal_time.py): the baseline recipe trained again, as its trial was.
EQUAL_TIME_KEY = "equal_time_baseline"


@dataclass(frozen=True)
class Exploitation:
    """What the trial that trains the winner further after the search is told (search/tuning/exploit.py)."""

    source_checkpoint: str | None  # the winner's best checkpoint it continues; None: from step 0
    provisional_steps: int  # the steps it expects to end at, until it has timed its own (trainer/schedule.py)
    finish_by: float  # time.time() by which it has trained, evaluated and saved its last step
    evaluation_seconds: float  # an evaluation's expected cost, until it has measured one
    eval_every_steps: int = 0  # steps between its evaluations (fewer than the trials'); 0: the trials' own
    evaluations: int = 0  # search.exploit.evaluations: spaced over its timed length once it has timed its steps
    last_step: int = 0  # search.exploit.max_epochs in the source's steps: where it ends if its deadline is later


@dataclass(frozen=True)
class TrialContext:
    """What every trial of a sweep shares."""

    sweep: dict[str, Any]  # SweepConfig.model_dump(mode="json")
    tokenized: dict[str, str]  # model name -> tokenized splits folder
    label_names: list[str] | None
    micro_batches: dict[str, int]  # combination_key -> micro-batch the probe chose (it fits the budget)
    eval_batches: dict[str, int]  # combination_key -> evaluation batch that fits
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    # A trial's length and cadence as the plan decided them (search/budget/plan.py): in steps of the space's mean
    # effective batch, or in evaluation periods where samples_per_evaluation allots the trials time.
    max_steps: int
    eval_every_steps: int
    # Where tracking writes wait while the server is down (tracking-spool/ in the sweep folder). A local Ray shares
    # the disk; on a multi-node cluster each node keeps its own spool under this path and sync runs where it is.
    spool_dir: str = ""
    checkpointing: dict[str, bool] = field(default_factory=dict)  # combination_key -> the probe's plan recomputes
    # combination_key -> samples between evaluations, when the plan allots the trials time rather than steps
    # (search/budget/plan.py); None: max_steps and eval_every_steps as they are.
    samples_per_evaluation: dict[str, int] | None = None
    train_rows: int = 0  # rows of the training split: the baseline's passes are capped (0: unknown, no cap)
    # When the plan allots the trials time: an evaluation period's seconds, and per combination_key an evaluation's
    # (the plan's estimates), by which the baseline keeps to its periods (baseline_clock). None: steps, as told.
    period_seconds: float | None = None
    evaluation_seconds: dict[str, float] | None = None
    exploitation: Exploitation | None = None  # set for the winner's continuation only; a fresh one at each resume
    # trial id -> a whole checkpoint of its own on disk, for a resumed trial that Tune restores with none (see
    # recovery.unregistered_checkpoints); None for a new sweep (and in a context pickled before it existed).
    resume_checkpoints: dict[str, str] | None = None


def planned_lengths(plan: SearchPlan) -> dict[str, Any]:
    """The TrialContext fields the plan decides: the trials' length and cadence, and where it allots them time, each
    combination's samples per evaluation, a period's seconds and an evaluation's."""
    return {"max_steps": plan.max_steps, "eval_every_steps": plan.eval_every_steps,
            "samples_per_evaluation": plan.samples_per_evaluation or None, "period_seconds": plan.period_seconds,
            "evaluation_seconds": {c.key: c.seconds_per_evaluation for c in plan.combinations} or None}


def trial_length(context: TrialContext, key: str, effective_batch: int) -> tuple[int, int]:
    """(max_steps, eval_every_steps) of a trial: the plan's, or, where it allots time, the combination's samples
    per evaluation in steps of this trial's batch (a larger batch takes fewer, larger steps in the same time)."""
    samples = (context.samples_per_evaluation or {}).get(key)
    if not samples:
        return context.max_steps, context.eval_every_steps
    every = max(1, round(samples / effective_batch))
    return (context.max_steps // context.eval_every_steps) * every, every


def local_batches(params: dict[str, Any], context: TrialContext) -> tuple[int, int]:
    """(micro-batch, evaluation batch) the probe found for this process's device; 0 when none fits. The probe table
    is per device kind today; each data-parallel rank looks up its own and the ranks agree on the minimum."""
    key = combination_key(params["model"], params["precision"], params["method"])
    micro = context.micro_batches.get(key, 0)
    return micro, context.eval_batches.get(key) or micro


def build_plan(params: dict[str, Any], context: TrialContext, output_dir: str, resume_from: str | None = None,
               devices: int = 1, batches: tuple[int, int] | None = None) -> TrialPlan:
    """The trial's full recipe from Optuna's sample and the sweep's shared context. A data-parallel rank passes the
    world size as `devices` and the (micro, eval) batches all ranks agreed on; otherwise this device's are used."""
    config = SweepConfig.model_validate(context.sweep)
    max_micro, eval_batch = batches or local_batches(params, context)
    key = combination_key(params["model"], params["precision"], params["method"])
    max_steps, eval_every = trial_length(context, key, int(params["effective_batch_size"]))
    if params.get(BASELINE_KEY):
        max_steps, eval_every = baseline_length(max_steps, eval_every, context.train_rows,
                                                int(params["effective_batch_size"]))
    if max_micro < 1:
        raise MemoryError(f"{key}: the memory probe found no micro-batch that fits the budget")
    plan = TrialPlan(
        candidate=config.candidate(params["model"]).model_dump(),
        task=config.data.task.value,
        label_names=context.label_names,
        tokenized_dir=context.tokenized[params["model"]],
        output_dir=output_dir,
        precision=params["precision"],
        method=params["method"],
        learning_rate=float(params["learning_rate"]),
        weight_decay=float(params["weight_decay"]),
        warmup_ratio=float(params["warmup_ratio"]),
        batch=plan_batches(int(params["effective_batch_size"]), max_micro, devices),
        eval_batch=eval_batch,
        max_steps=max_steps,
        eval_every_steps=eval_every,
        seed=config.seed,
        threads=int(config.resources.cpus_per_trial),
        trust_remote_code=config.trust_remote_code,
        resume_from=resume_from,
        lora_r=params.get("lora_r"),
        lora_alpha=params.get("lora_alpha"),
        lora_dropout=config.space.lora_dropout,
        dropout=None if params.get("dropout") is None else float(params["dropout"]),
        freeze_embeddings=freezes_embeddings(config, params),
        deepspeed_stage=config.resources.deepspeed_stage,
        gradient_checkpointing=context.checkpointing.get(key, False),
        use_gpu=config.resources.gpus_per_trial != 0,  # None (unset) on a CPU machine: no CUDA to use anyway
        group_by_length=config.data.group_by_length and not trains_like_trainer(params),
        text_pairs=config.data.text_pair_column is not None,
        baseline=bool(params.get(BASELINE_KEY)),
    )
    return baseline_clock(plan, context, key) if plan.baseline and devices == 1 else plan


def baseline_clock(plan: TrialPlan, context: TrialContext, key: str) -> TrialPlan:
    """The baseline of a sweep whose trials are allotted time keeps to its periods' seconds by its own clock
    (trainer/schedule.py: it times its steps, ends when they are spent, its linear decay re-drawn to end there, at its
    planned steps at most). The probe times the trials' recipe, and the baseline's trains more: the word embeddings
    (frozen in the trials) and the checkpoint's dropout. On 2 AVX2 cores its steps took 1.25x its neighbour's, so at the
    exploration's end it had made one of its two evaluations and was judged on its first (step 118 against the
    other's 236). A Tune restart of it (`resume_from`) trains its steps as planned."""
    if not context.period_seconds or plan.resume_from or plan.eval_every_steps < 1:
        return plan
    evaluations = max(1, math.ceil(plan.max_steps / plan.eval_every_steps))
    return dataclasses.replace(plan, finish_by=time.time() + evaluations * context.period_seconds,
                               evaluation_seconds=(context.evaluation_seconds or {}).get(key, 0.0),
                               evaluations=evaluations, last_step=plan.max_steps)


def trains_like_trainer(params: dict[str, Any]) -> bool:
    """The baseline trial and its equal-time run: the recipe a plain Trainer run trains, with its random batches
    (TrainingArguments' default sampler, not data.group_by_length) and every weight."""
    return bool(params.get(BASELINE_KEY) or params.get(EQUAL_TIME_KEY))


def freezes_embeddings(config: SweepConfig, params: dict[str, Any]) -> bool:
    """space.freeze_embeddings where it applies, never in the baseline's recipe nor in a continuation of it: a
    continuation resumes its source's optimizer state, whose groups hold the weights its source trained (a
    continuation that froze the baseline's word embeddings failed to load that state at every retry)."""
    baseline = trains_like_trainer(params) or params.get(CONTINUES_BASELINE_KEY)
    return config.space.freezes_embeddings(config.data.task, params["method"]) and not baseline


# TrainingArguments' num_train_epochs default: what a plain Trainer run trains.
TRAINER_EPOCHS = 3


def baseline_length(max_steps: int, eval_every: int, train_rows: int, effective_batch: int) -> tuple[int, int]:
    """The baseline trains what a plain Trainer run would, TRAINER_EPOCHS passes, unless a trial's length is shorter
    (the usual case under a time budget); a run shorter than an evaluation period still ends with an evaluation."""
    if train_rows < 1:
        return max_steps, eval_every
    steps = min(max_steps, math.ceil(TRAINER_EPOCHS * train_rows / effective_batch))
    return steps, min(eval_every, steps)
