"""The sweep file's `search:` section: algorithm, scheduler, budgets, the baseline recipe and the winner's further
training (search.exploit)."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from finesweep.spaces.sections import Method, Precision, Section, Task
from finesweep.spaces.units import parse_duration

# What a trial reports at each evaluation that a search may optimise, and which way is better: the Trainer's
# eval_loss, trainer/metrics.py's accuracy and macro-F1 (a classifier) or perplexity (a causal LM), and its training
# speed so far (trainer/trial.py).
THROUGHPUT_METRIC = "train_samples_per_second_so_far"
METRIC_MODES: dict[str, Literal["min", "max"]] = {
    "eval_accuracy": "max", "eval_f1_macro": "max", "eval_loss": "min", "eval_perplexity": "min",
    THROUGHPUT_METRIC: "max", "train_tokens_per_second_so_far": "max",
}
TASK_METRICS = {
    Task.classification: ("eval_accuracy", "eval_f1_macro", "eval_loss", THROUGHPUT_METRIC,
                          "train_tokens_per_second_so_far"),
    Task.causal_lm: ("eval_loss", "eval_perplexity", THROUGHPUT_METRIC, "train_tokens_per_second_so_far"),
}
# search.metric unset: what the user keeps. A classifier's accuracy, not its validation loss: the loss rises as the
# model grows confident while its accuracy still climbs, so picking by loss keeps an early checkpoint that a later
# one beats on accuracy (docs/defaults.md).
# A causal LM's loss (the order of its perplexity).
TASK_DEFAULT_METRIC = {Task.classification: "eval_accuracy", Task.causal_lm: "eval_loss"}


class AshaConfig(Section):
    """Asynchronous successive halving on the intermediate evaluations."""

    grace_period: int = Field(1, ge=1, description="Evaluations every trial gets before it can be stopped.")
    reduction_factor: int = Field(3, ge=2, description="Keep the best 1/reduction_factor at each rung.")


class BaselineRecipe(Section):
    """The recipe a user would run without finesweep. It trains as the sweep's first trial (never stopped early by
    ASHA, at most the Trainer's 3 epochs, at most a trial's length), its best checkpoint is measured on the test split
    like the winner's, and the export says how far the winner is from it. An unset field takes the defaults below."""

    model: str | None = Field(None, description=(
        "Candidate the baseline trains; unset = the first of the space's models with transformers' own head (pooling "
        "cls, what a plain Trainer run builds), else the first."))
    method: Method | None = Field(None, description=(
        "Unset = full where the space has it, else the space's first method."))
    precision: Precision | None = Field(None, description=(
        "Unset = fp32 (TrainingArguments' default); either way, where the probe dropped it, the first precision kept."))
    learning_rate: float | None = Field(None, gt=0, description=(
        "Unset = 5e-5 for full fine-tuning (TrainingArguments' default), 2e-4 for lora and qlora (the QLoRA paper's "
        "rate, the common LoRA recipe)."))
    effective_batch_size: int = Field(8, ge=1, description=(
        "Samples per optimizer step (TrainingArguments' per_device_train_batch_size default)."))
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description=(
        "TrainingArguments' default: no warm-up (then linear decay, as every trial)."))
    weight_decay: float = Field(0.0, ge=0, description="TrainingArguments' default: none.")
    lora_r: int = Field(8, ge=1, description="lora and qlora: peft's LoraConfig default rank.")
    lora_alpha: int = Field(16, ge=1, description=(
        "lora and qlora: twice the rank, the usual pairing (peft's own default is 8)."))
    budget: Literal["trial", "equal"] = Field("trial", description=(
        "trial: the recipe trains as the search's first trial; the export is compared with it at equal training on "
        "validation and, marked unequal, on test. equal: after the search it also trains from step 0 for the export's "
        "training seconds, both on test (the gain at equal time); doubles the search's time."))


AUTO_EVAL_EVERY_STEPS = 50  # search.eval_every_steps auto, where no time budget lowers it (search/budget/cadence.py)
AUTO_SHARE_UNPLANNED = 0.4  # search.exploit.share auto where the plan measured nothing to resolve it from
MAX_SHARE = 0.9
# search.exploit.max_epochs auto, a classifier's: the passes that make this many training samples, within the bounds.
# Two passes over 6,000 tweets (12,000 samples) scored above three, four paired runs of four; on 1,540 text pairs two
# passes (3,080 samples) left validation climbing and six (9,240) scored 8 points more on test; on 3,000 tweets
# auto's 4 passes (cut at 2.7 and 3.2 by the limit) scored 1.6 points over two at both seeds, on 1,000 the same
# (benchmarks/README.md).
# Small data sets want more passes than large ones (Mosbach et al. 2021; Zhang et al. 2021: train longer).
AUTO_MIN_SAMPLES = 12_000
AUTO_MIN_PASSES, AUTO_MAX_PASSES = 2.0, 10.0


class ExploitConfig(Section):
    """After the search, the rest of a time budget trains the winner further: the budget buys the best final model,
    not only the best configuration (scikit-learn's refit, AutoGluon's refit_full, PBT's survivors)."""

    share: Literal["auto"] | float = Field("auto", description=(
        "Fraction (at most 0.9) of search.time_budget_minutes kept to train the winner after the search (with what "
        "the trials leave); 0 = off. auto: 0.75 where the budget pays for at most one pass over the training split, "
        "0.4 at four or more, linear between; 0.4 unmeasured. The plan may lower it."))
    evaluations: int = Field(3, ge=1, description=(
        "Evaluations (each with its checkpoint) the winner's further training makes, its last one included: it is "
        "judged at its end, and the earlier ones are what a crash keeps. Each is a validation pass and a save."))
    max_epochs: Literal["auto"] | float | None = Field("auto", description=(
        "Most passes over the training split the winner makes, its trial's included; a budget that pays for more "
        "trains the runner-up model's best trial the same way, else the export starts early. auto: a classifier's "
        "passes make 12,000 samples, 2 to 10; a causal LM's, 2. null: the whole budget."))
    start: Literal["checkpoint", "scratch"] = Field("checkpoint", description=(
        "checkpoint: the winning trial goes on from its latest checkpoint on every core the search used, its learning "
        "rate re-drawn to decay to zero at the budget's end (warm restart); scratch: its configuration trains again "
        "from step 0 for the remaining time."))

    @field_validator("max_epochs")
    @classmethod
    def _positive_passes(cls, value: float | str | None) -> float | str | None:
        if isinstance(value, (int, float)) and value <= 0:
            raise ValueError(f"max_epochs must be more than 0 passes, but got {value:g}; write a number of passes such "
                             "as 3, auto, or null for the whole budget")
        return value

    def passes(self, train_rows: int, task: Task) -> float | None:
        """max_epochs resolved for a training split of `train_rows` rows (auto: AUTO_MIN_SAMPLES' passes for a
        classifier, within the bounds; AUTO_MIN_PASSES for a causal LM or rows unknown); None: the whole budget."""
        if self.max_epochs != "auto":
            return self.max_epochs
        if Task(task) != Task.classification or train_rows <= 0:
            return AUTO_MIN_PASSES
        return min(AUTO_MAX_PASSES, max(AUTO_MIN_PASSES, AUTO_MIN_SAMPLES / train_rows))

    @field_validator("share")
    @classmethod
    def _a_fraction(cls, value: float | str) -> float | str:
        if value != "auto" and not 0 <= value <= MAX_SHARE:
            raise ValueError(f"`0 <= share <= {MAX_SHARE}` must hold (the trials need some of the budget), but got "
                             f"{value:g}; write a fraction such as 0.4, 0 to turn it off, or auto")
        return value

    @property
    def fraction(self) -> float:
        """The share as a number: the plan resolves auto (search/budget/plan.py); unplanned, the fixed default."""
        return AUTO_SHARE_UNPLANNED if self.share == "auto" else self.share


class SearchConfig(Section):
    """How trials are sampled, run and stopped."""

    algorithm: Literal["tpe", "random", "grid"] = Field("tpe", description=(
        "Optuna sampler: multivariate TPE, random, or grid (every combination of the space, as a baseline)."))
    grid_points: int = Field(3, ge=2, description=(
        "Grid search: values per searched range (learning_rate, warmup_ratio, weight_decay, dropout), both ends "
        "included, log-spaced for a log range."))
    scheduler: Literal["asha", "none"] = Field("asha", description="Early stopping of poor trials.")
    asha: AshaConfig = Field(default_factory=AshaConfig, description="ASHA settings.")
    plateau_patience: int | None = Field(3, ge=1, description=(
        "A trial stops once this many evaluations in a row have not bettered its best (any improvement counts), "
        "whatever the scheduler; its best checkpoint stays a candidate. The baseline trial is never stopped. null = "
        "off."))
    num_trials: int = Field(8, ge=1, description="Trials to run, the baseline's (search.baseline) among them.")
    max_concurrent_trials: int | None = Field(None, ge=1, description=(
        "Trials running at once. Unset: 1 on a CPU; with CUDA, as many as the probe's peak memory lets share the GPUs "
        "(see resources.gpus_per_trial), at most the CPU cores over cpus_per_trial."))
    metric: str = Field(TASK_DEFAULT_METRIC[Task.classification], description=(
        "Metric the search optimises and the export picks its checkpoint by: a classifier reports eval_accuracy, "
        "eval_f1_macro, eval_loss; a causal LM eval_loss, eval_perplexity; both train_samples_per_second_so_far, "
        "train_tokens_per_second_so_far. Unset: eval_accuracy (classifier), eval_loss (causal LM)."))
    mode: Literal["min", "max"] = Field(METRIC_MODES[TASK_DEFAULT_METRIC[Task.classification]], description=(
        "Whether the metric is minimised or maximised. Unset: the way the metric is better (max for accuracy, F1 and "
        "speeds, min for loss and perplexity)."))
    eval_every_steps: int | Literal["auto"] = Field("auto", description=(
        "Optimizer steps between evaluations (each one reported to ASHA and MLflow). auto: 50 (max_steps at most), "
        "and under a time budget fewer where a trial of the slowest combination would not evaluate twice in the "
        "trials' share (the plan says so). A number stands as written."))
    max_steps: int = Field(200, ge=1, description="Optimizer steps per trial at most.")
    time_budget_minutes: float | None = Field(None, gt=0, description=(
        "Wall-clock budget of the search: the trials, then the winner trained further (search.exploit.share of it). "
        "When the trials' share ends, running trials stop (one yet to evaluate goes on to its first evaluation) and "
        "their evaluations count; the export runs after the budget."))
    time_limit: str | None = Field(None, description=(
        "Wall-clock limit of the whole `finesweep run` (data, probe, search, the winner's further training, export), "
        "e.g. 600s, 10m, 1.5h (`run --time-limit` sets it): the search gets what the rest's predicted time leaves, as "
        "the plan says first. Set it or time_budget_minutes, not both."))
    step_budget: int | None = Field(None, ge=1, description=(
        "Training steps of all trials together; when they are spent, running trials stop, their evaluations so far "
        "count, and the export goes on."))
    fit_to_budget: bool = Field(True, description=(
        "With time_budget_minutes or step_budget: fit the trials to the budget, as `finesweep plan` prints (a time "
        "budget: evaluation periods of equal seconds; a step budget: shorter trials; num_trials capped at the trials "
        "that can start). false: max_steps and num_trials as written."))
    keep_checkpoints: int = Field(2, ge=1, description="Best checkpoints each trial keeps on disk.")
    keep_optimizer_state: bool = Field(False, description=(
        "After the export, the checkpoints keep their optimizer and scheduler state (what training on from one "
        "needs). false: dropped once nothing of the sweep trains any more, the weights kept: a full fine-tune's "
        "checkpoint shrinks to about a third, and every checkpoint still loads and exports."))
    baseline: Literal["auto", "off"] | BaselineRecipe = Field("auto", description=(
        "The recipe a user would run without finesweep, trained as the sweep's first trial and reported beside the "
        "winner. auto = Trainer defaults (full: lr 5e-5, batch 8, fp32; lora/qlora: lr 2e-4, r 8, alpha 16); a "
        "mapping sets its fields (model, method, ..., budget); off = none."))
    exploit: ExploitConfig = Field(default_factory=ExploitConfig, description=(
        "The rest of the time budget to the winner after the search (search.exploit.*)."))
    lr_range_test: Literal["auto", "on", "off"] = Field("auto", description=(
        "A short run per model and method whose space.learning_rate spans over a decade, at rates rising through it; "
        "the trials sample the decade under where the loss stopped falling. auto: where it costs 5% of the sweep's "
        "time or less; on: always; off: never."))
    initial_points: list[dict[str, Any]] = Field(default_factory=list, description=(
        "Configurations tried first, after the baseline (e.g. your current recipe); unlisted dimensions are sampled. "
        "Empty: TPE tries the space's centre first (each range's middle, geometric for a log range; the middle batch "
        "size; the first model; the precision the probe measured fastest)."))
    min_relative_speed: float = Field(1 / 3, ge=0, lt=1, description=(
        "A precision or method whose measured samples/s is below this fraction of the fastest combination's, for "
        "every candidate model, leaves the space with its reason (bf16 on a CPU without bf16 instructions); an "
        "initial point on it moves to the fastest value kept. 0 keeps everything."))
    second_objective: Literal["none", "throughput"] = Field("none", description=(
        "A second objective Optuna samples for (multi-objective): throughput = the trial's training samples per "
        "second (train_samples_per_second_so_far, maximised); the Pareto front is reported. ASHA still stops on the "
        "metric alone."))
    pick: Literal["best_metric", "fastest_within"] = Field("best_metric", description=(
        "Which trial's best checkpoint is exported: the best metric's, or the fastest trial whose best metric is "
        "within pick_tolerance of the best (needs second_objective)."))
    pick_tolerance: float = Field(0.01, ge=0, description=(
        "pick: fastest_within: how far (absolute, in the metric's units, inclusive) a trial's best metric may fall "
        "short of the best."))

    @field_validator("lr_range_test", mode="before")
    @classmethod
    def _switch_words(cls, value: Any) -> Any:
        """YAML reads a bare on and off as true and false: they mean the words."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="before")
    @classmethod
    def _mode_follows_metric(cls, data: Any) -> Any:
        """A metric named without a mode is optimised the way it is better: `metric: eval_accuracy` alone must not
        be minimised."""
        if isinstance(data, dict) and "mode" not in data and data.get("metric") in METRIC_MODES:
            return {**data, "mode": METRIC_MODES[data["metric"]]}
        return data

    @model_validator(mode="after")
    def _mode_fits_metric(self) -> "SearchConfig":
        better = METRIC_MODES.get(self.metric)
        if better is not None and self.mode != better:
            raise ValueError(
                f"mode: {self.mode} would {'minimise' if self.mode == 'min' else 'maximise'} {self.metric}, which is "
                f"better {'higher' if better == 'max' else 'lower'}: the search would pick the worst trials; remove "
                f"mode (it follows the metric) or set mode: {better}"
            )
        return self

    def metric_problem(self, task: Task) -> str | None:
        """Why search.metric is not one a trial of `task` reports (every trial would score nothing), or None."""
        reported = TASK_METRICS[task]
        if self.metric in reported:
            return None
        close = difflib.get_close_matches(self.metric, reported, n=1, cutoff=0.7)
        return (f"search.metric: a {task.value} trial does not report {self.metric!r}, so no trial could be compared "
                f"or picked; it reports {', '.join(reported)}. "
                f"{f'Did you mean {close[0]!r}? ' if close else ''}Set search.metric to one of them")

    @property
    def baseline_budget(self) -> Literal["trial", "equal"] | None:
        """How the baseline is measured (BaselineRecipe.budget); None where search.baseline is off."""
        if self.baseline == "off":
            return None
        return self.baseline.budget if isinstance(self.baseline, BaselineRecipe) else "trial"

    @property
    def time_limit_seconds(self) -> float | None:
        return parse_duration(self.time_limit) if self.time_limit else None

    @field_validator("time_limit")
    @classmethod
    def _a_duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @model_validator(mode="after")
    def _one_time_bound(self) -> "SearchConfig":
        if self.time_limit and self.time_budget_minutes:
            raise ValueError(
                f"time_limit ({self.time_limit}) bounds the whole command and gives the search what is left, and "
                f"time_budget_minutes ({self.time_budget_minutes:g}) bounds the search alone; set one of them"
            )
        return self

    @model_validator(mode="after")
    def _pick_rule_fits(self) -> "SearchConfig":
        if self.pick == "fastest_within" and self.second_objective == "none":
            raise ValueError(
                "pick: fastest_within needs a speed to compare, but second_objective is none; "
                "set second_objective: throughput (the search then trades the metric against speed and reports the "
                "Pareto front), or use pick: best_metric"
            )
        # Compared with the default, not model_fields_set: a dumped config (resume, each trial) sets every field.
        if self.pick_tolerance != type(self).model_fields["pick_tolerance"].default and self.pick != "fastest_within":
            raise ValueError(
                f"pick_tolerance applies only to pick: fastest_within, but got pick_tolerance="
                f"{self.pick_tolerance:g} with pick: {self.pick}; set pick: fastest_within, or remove pick_tolerance"
            )
        if self.second_objective == "throughput" and self.metric == THROUGHPUT_METRIC:
            raise ValueError(
                f"second_objective: throughput maximises {THROUGHPUT_METRIC}, which is already the "
                "metric; choose a quality metric as metric (e.g. eval_loss, eval_accuracy)"
            )
        return self

    @model_validator(mode="after")
    def _grid_has_no_initial_points(self) -> "SearchConfig":
        if self.algorithm == "grid" and self.initial_points:
            raise ValueError(
                f"initial_points cannot be used with algorithm: grid, but got {len(self.initial_points)} initial "
                "point(s): a grid search runs the grid's own points in a seeded order; remove initial_points, "
                "or use algorithm: tpe or random to start from them"
            )
        return self

    @model_validator(mode="after")
    def _eval_fits(self) -> "SearchConfig":
        if self.eval_every_steps != "auto" and self.eval_every_steps > self.max_steps:
            raise ValueError(
                f"eval_every_steps ({self.eval_every_steps}) must be <= max_steps ({self.max_steps}), "
                "or no trial is ever evaluated"
            )
        return self
