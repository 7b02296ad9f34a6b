"""One trial as a straight-line recipe: set up -> train -> evaluate at every interval -> save.

The trial knows nothing of Ray or MLflow: every evaluation goes to an `EvaluationSink`
that the controller supplies (it reports to Tune and logs to MLflow).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from finesweep.spaces import ModelCandidate, Precision, Task
from finesweep.trainer import data, models
from finesweep.trainer.metrics import classification_metrics, with_perplexity
from finesweep.trainer.models import CHECKPOINTING_KWARGS
from finesweep.trainer.probe_step import device_gauge
from finesweep.trainer.row_scores import RowCollector

log = logging.getLogger(__name__)


class EvaluationSink(Protocol):
    """Where a trial's numbers go."""

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        """Training loss, learning rate and throughput, every few steps."""

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        """One evaluation on the validation split, with the checkpoint saved at that step."""


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass(frozen=True)
class BatchPlan:
    """How an effective batch is made: micro-batch x accumulation x devices, exactly."""

    effective: int
    micro: int
    accumulation: int
    devices: int = 1


class BatchSplitError(ValueError):
    """The effective batch is not a multiple of the devices' count: no exact split exists."""


def plan_batches(effective: int, max_micro: int, devices: int = 1) -> BatchPlan:
    """The largest micro-batch <= max_micro that makes `effective` exactly (never a silently different batch)."""
    if effective % devices:
        raise BatchSplitError(
            f"effective batch {effective} cannot be split evenly over {devices} devices "
            f"(resources.workers_per_trial: {devices}); list only multiples of {devices} in space.effective_batch_size")
    per_device = effective // devices
    micro = max(d for d in range(1, min(per_device, max_micro) + 1) if per_device % d == 0)
    return BatchPlan(effective=effective, micro=micro, accumulation=per_device // micro, devices=devices)


@dataclass(frozen=True)
class TrialPlan:
    """Everything one trial needs, as plain data (it crosses into a Ray worker)."""

    candidate: dict[str, Any]
    task: str
    label_names: list[str] | None
    tokenized_dir: str
    output_dir: str
    precision: str
    method: str
    learning_rate: float
    weight_decay: float
    warmup_ratio: float
    batch: BatchPlan
    eval_batch: int
    max_steps: int
    eval_every_steps: int
    seed: int
    threads: int
    trust_remote_code: bool = False
    resume_from: str | None = None  # a full Trainer checkpoint (weights, optimizer, scheduler, step) to continue from
    lora_r: int | None = None
    lora_alpha: int | None = None
    lora_dropout: float = 0.05
    dropout: float | None = None  # the model's dropout rates (space.dropout); None: the checkpoint's own
    freeze_embeddings: bool = False  # the word embeddings do not train (space.freeze_embeddings; never the baseline)
    deepspeed_stage: int = 0  # ZeRO stage through the Trainer's DeepSpeed integration; 0 = plain torch
    gradient_checkpointing: bool = False  # the probe's plan for this combination (resources.gradient_checkpointing)
    use_gpu: bool = True  # False: the CPU even where CUDA is present (resources.gpus_per_trial: 0)
    group_by_length: bool = True  # batches of rows of similar length (data.group_by_length)
    text_pairs: bool = False  # rows are text pairs (data.text_pair_column): the tokenizer saved with it separates them
    baseline: bool = False  # the recipe a user would run without finesweep (search.baseline), not a sample
    # The winner trained further after the search (search.exploit): it ends by this time.time() instead of at
    # max_steps, which is then the provisional end (trainer/schedule.py); `restart_schedule`: it continues another
    # run's finished schedule (a warm restart); `evaluation_seconds`: an evaluation's cost until it measures one.
    finish_by: float | None = None
    restart_schedule: bool = False
    evaluation_seconds: float = 0.0
    evaluations: int = 0  # how many a run that ends by its deadline makes, spaced once it has timed its steps
    last_step: int = 0  # where a run that ends by its deadline ends if that comes first (search.exploit.max_epochs)

    def params(self) -> dict[str, Any]:
        """The numbers worth logging once per trial."""
        # A run that ends by its deadline times its own end: its provisional max_steps and how it started differ
        # each time it (re)starts, and MLflow keeps a run's first value of a parameter.
        timed = ("finish_by", "restart_schedule", "evaluation_seconds", "evaluations", "last_step",
                 *(("max_steps",) if self.finish_by else ()))
        flat = {k: v for k, v in asdict(self).items()
                if k not in ("candidate", "label_names", "batch", "tokenized_dir", "output_dir", "resume_from", *timed)}
        flat.update(model=self.candidate["name"], effective_batch_size=self.batch.effective,
                    micro_batch=self.batch.micro, gradient_accumulation=self.batch.accumulation, devices=self.batch.devices)
        return flat


def _checkpoint_step(checkpoint_dir: str) -> int:
    """The optimizer step a Trainer checkpoint was saved at (the Trainer resumed at its max_steps trains one more)."""
    return int(json.loads((Path(checkpoint_dir) / "trainer_state.json").read_text())["global_step"])


def train(plan: TrialPlan, sink: EvaluationSink) -> dict[str, float]:
    """Run the trial to max_steps (unless the scheduler stops it first); returns the last evaluation."""
    import torch

    torch.set_num_threads(max(1, plan.threads))
    if plan.resume_from and _checkpoint_step(plan.resume_from) >= min(_step_bound(plan), plan.last_step or math.inf):
        return {}  # restarted from its final checkpoint (killed after its last report): nothing is left to train
    if _past_deadline(plan):
        return {}  # no evaluation could end by its deadline any more (a resume after the budget's end)
    if plan.deepspeed_stage:
        single_process_rendezvous()
    trainer = _build_trainer(plan, sink)
    if _past_deadline(plan):
        return {}  # the model's load ate what was left
    trainer.train(resume_from_checkpoint=plan.resume_from)
    return trainer.state.log_history[-1] if trainer.state.log_history else {}


def _past_deadline(plan: TrialPlan) -> bool:
    """Whether a run that ends by its deadline could no longer evaluate by it (an evaluation now would end past it).
    Asked again once the model is loaded: Ray's workers run at niceness 15, and beside another process's load a
    resumed continuation's worker took 41 s to start, then loaded its model past that point, and Tune's backstop
    stopped it 38 s after its deadline."""
    return plan.finish_by is not None and time.time() + plan.evaluation_seconds >= plan.finish_by


def _step_bound(plan: TrialPlan) -> int:
    """The Trainer's max_steps: the plan's, or for a run that ends by its deadline a bound it never reaches."""
    from finesweep.trainer.schedule import OVERSHOOT

    return plan.max_steps * OVERSHOOT if plan.finish_by is not None else plan.max_steps


def deepspeed_config(plan: TrialPlan) -> dict[str, Any]:
    """The ZeRO config handed to TrainingArguments(deepspeed=...), written from the trial's plan: its stage, its
    micro-batch, accumulation and effective batch (micro x accumulation x devices), and its precision. The Trainer
    checks each number against its TrainingArguments (made from the same plan) and refuses a mismatch, so a trial
    cannot train with another batch or precision than the one it reports; clipping follows max_grad_norm ("auto")."""
    batch = plan.batch
    return {"zero_optimization": {"stage": plan.deepspeed_stage}, "train_micro_batch_size_per_gpu": batch.micro,
            "gradient_accumulation_steps": batch.accumulation, "train_batch_size": batch.effective,
            "gradient_clipping": "auto", "bf16": {"enabled": plan.precision == Precision.bf16.value},
            "fp16": {"enabled": plan.precision == Precision.fp16.value}}


def single_process_rendezvous() -> None:
    """DeepSpeed always initialises torch.distributed; a single-process trial (no launcher, no Ray Train worker
    group, which set these) is a world of one on this machine."""
    import os
    import socket

    if "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def trial_inputs(plan: TrialPlan):
    """(task, tokenizer, model, tokenized splits) of the plan, as its trial trains them."""
    task = Task(plan.task)
    candidate = ModelCandidate(**plan.candidate)
    tokenizer = models.load_tokenizer(candidate, plan.trust_remote_code, text_pairs=plan.text_pairs)
    model = _load_model(plan, candidate, task, tokenizer)
    return task, tokenizer, model, data.load_tokenized(Path(plan.tokenized_dir))


def _build_trainer(plan: TrialPlan, sink: EvaluationSink):
    task, tokenizer, model, splits = trial_inputs(plan)
    order = longest_first(splits["validation"])
    rows = RowCollector(order)
    return _evaluating_by_length()(
        rows=rows,
        causal=task == Task.causal_lm,
        model=model,
        args=_training_arguments(plan),
        train_dataset=splits["train"],
        eval_dataset=splits["validation"].select(order),
        data_collator=data.collator(tokenizer, task),
        processing_class=tokenizer,
        compute_metrics=classification_metrics if task == Task.classification else None,
        callbacks=[_sink_callback(sink, task, divergence_limit(model, task), rows), *_deadline(plan)],
    )


def longest_first(split) -> list[int]:
    """The split's row indices, longest row first: evaluated in that order, each batch pads to about its own rows'
    length."""
    lengths = [len(ids) for ids in split["input_ids"]]
    return sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)


def _evaluating_by_length():
    """transformers' Trainer, evaluating the validation split in the order given (longest_first's) on one process,
    each row's own score kept (trainer/row_scores.py). Its own order sorts megabatches of a quarter of a shuffled
    split's batches (LengthGroupedSampler), so a small split's batches pad to their longest row: the LLM example's 64
    validation conversations took 21 s in fp32 on 2 cores, 15 s sorted."""
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    class EvaluatingByLength(Trainer):
        def __init__(self, *, rows: RowCollector, causal: bool, **kwargs):
            super().__init__(**kwargs)
            self.rows, self.causal = rows, causal

        def _get_eval_sampler(self, eval_dataset):
            if self.args.world_size > 1 or eval_dataset is None:  # shards across processes: transformers' own
                return super()._get_eval_sampler(eval_dataset)
            return SequentialSampler(eval_dataset)

        def evaluate(self, *args, **kwargs):
            self.rows.reset()
            return super().evaluate(*args, **kwargs)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training or "labels" not in inputs:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            labels = inputs["labels"]
            loss, outputs = super().compute_loss(model, inputs, True, num_items_in_batch)
            self.rows.add(outputs["logits"], labels, self.causal)
            return (loss, outputs) if return_outputs else loss

    return EvaluatingByLength


def _deadline(plan: TrialPlan) -> list[Any]:
    """The callback that ends a run by its deadline (trainer/schedule.py), when it has one."""
    if plan.finish_by is None:
        return []
    from finesweep.trainer.schedule import FinishByDeadline

    return [FinishByDeadline(plan.finish_by, plan.evaluation_seconds, plan.restart_schedule,
                             evaluations=plan.evaluations, last_step=plan.last_step)]


class _Throughput:
    """Samples and tokens per second and peak memory of the training so far (from the first step of this run of
    the trial, so neither model loading nor imports count), for every evaluation's report."""

    def __init__(self):
        self.gauge = device_gauge()
        self.started, self.step_at_start, self.tokens_at_start = 0.0, 0, 0

    def start(self, state) -> None:
        self.gauge.reset()  # a reused worker process: its peak so far belongs to the trial before
        self.started = time.perf_counter()
        self.step_at_start, self.tokens_at_start = state.global_step, int(state.num_input_tokens_seen)

    def so_far(self, state, args) -> dict[str, float]:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        samples = (state.global_step - self.step_at_start) * args.train_batch_size * args.gradient_accumulation_steps * args.world_size
        return {"train_samples_per_second_so_far": samples / elapsed,
                "train_tokens_per_second_so_far": (int(state.num_input_tokens_seen) - self.tokens_at_start) / elapsed,
                "peak_memory_mib": self.gauge.peak() / 2**20}


EXPLOSION_FACTOR = 100  # a loss this many times a uniform guess's has left any useful region for good


def divergence_limit(model, task: Task) -> float:
    """The training loss past which a trial has diverged: EXPLOSION_FACTOR x the cross-entropy of guessing
    uniformly among the model's classes (classification) or its vocabulary (causal LM)."""
    config = model.config
    choices = config.num_labels if task == Task.classification else config.get_text_config().vocab_size
    return EXPLOSION_FACTOR * math.log(max(choices, 2))


def _load_model(plan: TrialPlan, candidate: ModelCandidate, task: Task, tokenizer):
    from transformers import set_seed

    # The new head (and LoRA's adapters) are initialised here, before the Trainer seeds anything: seed now, or
    # the same trial trains from a different start each time it runs.
    set_seed(plan.seed)
    setup = models.TrainingSetup(method=plan.method, precision=plan.precision, lora_r=plan.lora_r or 8,
                                 lora_alpha=plan.lora_alpha or 16, lora_dropout=plan.lora_dropout,
                                 gradient_checkpointing=plan.gradient_checkpointing, dropout=plan.dropout,
                                 freeze_embeddings=plan.freeze_embeddings)
    model = models.load_trainable(candidate, task, plan.label_names, setup, plan.trust_remote_code, _device(plan.use_gpu))
    return models.pad_like(model, tokenizer)


def _device(use_gpu: bool) -> str:
    """Where this process trains: its CUDA device when it has one (Ray gives a trial its GPUs) and may use it, else
    the CPU."""
    import torch

    return f"cuda:{torch.cuda.current_device()}" if use_gpu and torch.cuda.is_available() else "cpu"


def _training_arguments(plan: TrialPlan):
    import torch
    from transformers import TrainingArguments

    on_cuda = plan.use_gpu and torch.cuda.is_available()
    return TrainingArguments(
        output_dir=plan.output_dir,
        max_steps=_step_bound(plan),
        learning_rate=plan.learning_rate,
        weight_decay=plan.weight_decay,
        warmup_steps=int(round(plan.warmup_ratio * plan.max_steps)),
        per_device_train_batch_size=plan.batch.micro,
        gradient_accumulation_steps=plan.batch.accumulation,
        per_device_eval_batch_size=plan.eval_batch,
        # Rows of similar length batched together pad less: the same samples in fewer token positions.
        train_sampling_strategy="group_by_length" if plan.group_by_length else "random",
        bf16=plan.precision == Precision.bf16.value,
        fp16=plan.precision == Precision.fp16.value,
        use_cpu=not on_cuda,
        eval_strategy="steps",
        eval_steps=plan.eval_every_steps,
        save_strategy="steps",
        save_steps=plan.eval_every_steps,
        # Tune copies each reported checkpoint into the sweep's storage and keeps the best k and the latest;
        # the trial folder needs only the latest one. Optimizer and scheduler state are saved too, so a trial
        # whose worker died resumes at its last evaluation instead of starting over.
        save_total_limit=1,
        save_only_model=False,
        logging_steps=max(1, plan.eval_every_steps // 5),
        include_num_input_tokens_seen="non_padding",  # the trial's tokens/s counts real tokens, not padding
        seed=plan.seed,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        deepspeed=deepspeed_config(plan) if plan.deepspeed_stage else None,
        activation_checkpointing=plan.gradient_checkpointing,
        activation_checkpointing_kwargs=CHECKPOINTING_KWARGS if plan.gradient_checkpointing else None,
    )


def _sink_callback(sink: EvaluationSink, task: Task, loss_limit: float, rows: RowCollector):
    """A TrainerCallback that hands logs and each evaluation, with its checkpoint, to the sink; the checkpoint holds
    the evaluation's row scores (where it scored every row: not a data-parallel trial's shards)."""
    from transformers import TrainerCallback

    class SinkCallback(TrainerCallback):
        def __init__(self):
            self.last_eval: dict[str, float] | None = None
            self.throughput = _Throughput()

        def on_train_begin(self, args, state, control, **kwargs):
            self.throughput.start(state)  # after a resume: counted from the checkpoint on

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            loss = logs.get("loss")
            if loss is not None and not (math.isfinite(loss) and loss <= loss_limit):
                raise DivergedError(f"training loss became {loss:.4g} at step {state.global_step} "
                                    f"(the limit is {loss_limit:.3g}: {EXPLOSION_FACTOR} x a uniform guess's)")
            if logs and not any(k.startswith("eval_") for k in logs):
                sink.on_log(state.global_step, logs)

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            metrics = {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
            self.last_eval = with_perplexity(metrics) if task == Task.causal_lm else metrics

        def on_save(self, args, state, control, **kwargs):
            # The Trainer saves right after evaluating at the same step: report both together.
            if self.last_eval is None:
                return
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if (scores := rows.scores()) is not None and checkpoint.is_dir():
                scores.save(checkpoint)
            sink.on_evaluation(state.global_step, {**self.last_eval, **self.throughput.so_far(state, args)},
                               checkpoint)
            self.last_eval = None

    return SinkCallback()
