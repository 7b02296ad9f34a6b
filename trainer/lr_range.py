"""A learning-rate range test (Smith 2017, "Cyclical Learning Rates for Training Neural Networks", section 3.3):
one short training run whose rate rises geometrically from a range's low end to its high end, one optimizer step
at each rate. Where the loss bottoms out and turns up is the rate past which training stops improving; what to make
of it is the controller's (search/range_test.py).

The loss recorded after each step is that of one fixed batch of validation rows, not the step's own training batch:
Smith's test smooths the training loss over a hundred steps, and over twenty the batches' own differences drown the
rate's effect (on the LLM example's chat rows, batches of 8 scored 1.5 to 3.5 from one step to the next)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from finesweep.trainer import data
from finesweep.trainer.probe_step import stderr_to
from finesweep.trainer.trial import TrialPlan, trial_inputs

# What each step records, in words: part of the key of a cached answer, so that one recorded otherwise is not read.
RECORDED = "the loss of a fixed batch of validation rows after each step, random training batches"
# The test stops once the loss is this many times the lowest so far: past that point it only diverges further.
DIVERGED_FACTOR = 4.0


@dataclass(frozen=True)
class RangeStep:
    """One optimizer step of the test: the rate it trained at and the training loss of its batch."""

    step: int
    learning_rate: float
    loss: float


def step_rate(low: float, high: float, steps: int, step: int) -> float:
    """The rate of optimizer step `step` (1-based) of `steps`: low at the first, high at the last, geometric between."""
    return low * (high / low) ** ((step - 1) / max(steps - 1, 1))


def range_test(plan: TrialPlan, low: float, high: float) -> list[RangeStep]:
    """Train `plan` (its model, method, precision, batch and data; its learning rate and length are replaced) for
    plan.max_steps optimizer steps at rates from `low` to `high`, in random batches; returns each step's rate and the
    loss of the fixed batch after it, up to the step where that loss diverged (DIVERGED_FACTOR) or went non-finite."""
    import torch

    torch.set_num_threads(max(1, plan.threads))
    plan = replace(plan, learning_rate=low, warmup_ratio=0.0, group_by_length=False)
    trainer = _trainer(plan, high)
    trainer.train()
    return trainer.range_steps


def range_test_in_process(plan: TrialPlan, low: float, high: float, log_file: str | None) -> list[dict[str, float]]:
    """range_test as a fresh process runs it (search/range_test.py): its standard error to the sweep's log, its
    steps as plain data."""
    if log_file:
        stderr_to(log_file)
    return [asdict(step) for step in range_test(plan, low, high)]


def _trainer(plan: TrialPlan, high: float):
    task, tokenizer, model, splits = trial_inputs(plan)
    collator = data.collator(tokenizer, task)
    held_out = splits["validation"] if "validation" in splits and len(splits["validation"]) else splits["train"]
    fixed = collator([held_out[i] for i in range(min(plan.batch.micro, len(held_out)))])
    return _range_trainer_class()(
        plan=plan, high=high, fixed=fixed, model=model, args=_arguments(plan), train_dataset=splits["train"],
        data_collator=collator, processing_class=tokenizer)


def _arguments(plan: TrialPlan):
    import torch
    from transformers import TrainingArguments

    on_cuda = plan.use_gpu and torch.cuda.is_available()
    return TrainingArguments(
        output_dir=plan.output_dir, max_steps=plan.max_steps, learning_rate=plan.learning_rate,
        weight_decay=plan.weight_decay, per_device_train_batch_size=plan.batch.micro,
        gradient_accumulation_steps=plan.batch.accumulation,
        train_sampling_strategy="group_by_length" if plan.group_by_length else "random",
        bf16=plan.precision == "bf16", fp16=plan.precision == "fp16", use_cpu=not on_cuda,
        eval_strategy="no", save_strategy="no", logging_steps=1, seed=plan.seed, report_to="none",
        disable_tqdm=True, dataloader_num_workers=0,
        logging_nan_inf_filter=False)  # a non-finite loss is the test's answer, not a log to smooth over


def _range_trainer_class():
    """transformers' Trainer with the test's schedule (its designed hook, create_scheduler) and a callback that
    scores the fixed batch after every optimizer step and stops at divergence."""
    import torch
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import PrinterCallback, Trainer, TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self, trainer):
            self.trainer = trainer

        def on_step_end(self, args, state, control, **kwargs):
            owner = self.trainer
            loss = owner.fixed_loss()
            rate = step_rate(args.learning_rate, owner.high, args.max_steps, state.global_step)
            owner.range_steps.append(RangeStep(state.global_step, rate, loss))
            lowest = min(s.loss for s in owner.range_steps)
            if not math.isfinite(loss) or loss > DIVERGED_FACTOR * lowest:
                control.should_training_stop = True

    class RangeTrainer(Trainer):
        def __init__(self, *, plan: TrialPlan, high: float, fixed: dict, **kwargs):
            super().__init__(**kwargs)
            self.high, self.fixed, self.range_steps = high, fixed, []
            self.add_callback(Recorder(self))
            self.remove_callback(PrinterCallback)  # the test's record is range_steps, not the terminal
            self._steps = plan.max_steps

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                ratio = self.high / self.args.learning_rate
                # LambdaLR scales the optimizer's rate (the range's low end): step k trains at low x ratio^(k/(n-1)).
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer,
                                             lambda k: ratio ** (k / max(self._steps - 1, 1)))
            return self.lr_scheduler

        def fixed_loss(self) -> float:
            """The fixed batch's loss as the model stands, in the trials' precision, dropout off."""
            self.model.eval()
            with torch.no_grad(), self.compute_loss_context_manager():
                loss = self.compute_loss(self.model, self._prepare_inputs(dict(self.fixed)))
            self.model.train()
            return float(loss)

    return RangeTrainer
