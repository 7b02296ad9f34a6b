"""The best (trial, evaluation step) over all evaluations of all trials, not each trial's last."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finesweep.spaces.space import BASELINE_KEY

# The attribute Tune ranks a trial's checkpoints by (CheckpointConfig): the search metric with ties broken by step.
CHECKPOINT_SCORE = "finesweep_checkpoint_score"
# Tune keeps the LATER of two checkpoints with equal scores, so an exact tie at the best value would evict the
# earlier step that pick_best prefers. A penalty this small per step (relative to the value) orders exact ties
# and cannot reorder values that differ by more than about a millionth at a million steps.
TIE_BREAK_PER_STEP = 1e-12
# The trial's best value of the search metric over its evaluations so far, reported with each evaluation. The
# searcher (Optuna is told a trial's last result) and ASHA judge a trial by it: a trial is worth its best
# checkpoint, which is what the export picks from, not its last evaluation.
BEST_SO_FAR = "finesweep_best_so_far"
# Evaluations in a row, up to this one, that have not bettered the trial's best (0: this one is its best so far):
# a trial stops at search.plateau_patience of them (callbacks.PlateauStopper).
SINCE_BEST = "finesweep_evaluations_since_best"

# The result key under which Ray Train's TuneReportCallback passes a data-parallel trial's checkpoint path to Tune
# (ray.tune.integration.ray_train.CHECKPOINT_PATH_KEY).
TRAIN_CHECKPOINT_PATH = "checkpoint_path"

# Names of trials (Tune's trial and folder names, and so the MLflow runs' and the leaderboard's): a search trial by its
# id, the winner's continuation (search.exploit) by the trial it continues, the equal-time baseline by its role.
SEARCH_TRIAL_PREFIX = "trial-"
CONTINUATION_PREFIX = "exploit-"
EQUAL_TIME_TRIAL = "baseline-equal-time"  # the baseline recipe trained again for the export's seconds


def search_trial_name(trial_id: str) -> str:
    """A search trial's name (`trial-<id>`), as every sentence, tag and table that names it writes it."""
    return f"{SEARCH_TRIAL_PREFIX}{trial_id}"

SAMPLED_KEYS = ("model", "precision", "method", "learning_rate", "effective_batch_size",
                "warmup_ratio", "weight_decay", "dropout", "lora_r", "lora_alpha")


@dataclass(frozen=True)
class Best:
    """The winning evaluation and the checkpoint saved with it."""

    trial_id: str
    step: int
    metric: str
    value: float
    params: dict[str, Any]
    checkpoint_dir: Path
    mlflow_run_id: str | None
    baseline: bool = False  # an evaluation of the baseline trial (its config carries BASELINE_KEY)

    @property
    def model(self) -> str:
        return self.params["model"]

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> "Best":
        """The inverse of as_dict (as summary.json holds it)."""
        return cls(trial_id=saved["trial_id"], step=int(saved["step"]), metric=saved["metric"], value=float(saved["value"]),
                   params=dict(saved["params"]), checkpoint_dir=Path(saved["checkpoint_dir"]),
                   mlflow_run_id=saved.get("mlflow_run_id"), baseline=bool(saved.get("baseline")))

    def as_dict(self) -> dict[str, Any]:
        return {"trial_id": self.trial_id, "step": self.step, "metric": self.metric, "value": self.value,
                "params": self.params, "model": self.model, "checkpoint_dir": str(self.checkpoint_dir),
                "mlflow_run_id": self.mlflow_run_id, "baseline": self.baseline}


def checkpoint_score(value: float, step: int, mode: str) -> float:
    """Higher is better whatever the mode; of two equal values the earlier step scores higher."""
    oriented = value if mode == "max" else -value
    return oriented - step * TIE_BREAK_PER_STEP * max(1.0, abs(value))


def best_of(values: list[float], mode: str) -> float:
    """The best finite value of `values` for the mode; NaN when none is finite."""
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return math.nan
    return max(finite) if mode == "max" else min(finite)


def evaluations_since_best(values: list[float], mode: str) -> int:
    """How many of the last `values` in a row have not bettered the best before them (a tie does not better it;
    a value that is not finite never does)."""
    since, best = 0, math.nan
    for value in values:
        since = 0 if betters(value, best, mode) else since + 1
        best = best_of([best, value], mode)
    return since


def betters(value: float, best: float, mode: str) -> bool:
    """Whether `value` is finite and strictly better than `best` (anything finite betters a NaN best)."""
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        return False
    return math.isnan(best) or (value > best if mode == "max" else value < best)


def pick_best(results, metric: str, mode: str) -> Best | None:
    """Across every kept checkpoint of every trial (each evaluation reports one), the best by `metric`;
    ties go to the earlier step. None when no trial reported a finite value."""
    candidates = []
    for result in results:
        for checkpoint, metrics in kept_checkpoints(result):
            value = metrics.get(metric)
            if isinstance(value, (int, float)) and math.isfinite(value):
                rank = -value if mode == "max" else value
                candidates.append((rank, metrics.get("step", 0), result, checkpoint, metrics))
    if not candidates:
        return None
    _, step, result, checkpoint, metrics = min(candidates, key=lambda c: (c[0], c[1]))
    params = {k: v for k, v in result.config.items() if k in SAMPLED_KEYS}
    return Best(trial_id=metrics.get("trial_id", ""), step=int(step), metric=metric, value=float(metrics[metric]),
                params=params, checkpoint_dir=Path(checkpoint.path), mlflow_run_id=metrics.get("mlflow_run_id"),
                baseline=bool(result.config.get(BASELINE_KEY)))


def baseline_of(results, metric: str, mode: str) -> Best | None:
    """The baseline trial's best evaluation (its config carries BASELINE_KEY), or None when none ran or none of its
    evaluations was finite."""
    return pick_best([result for result in results if (result.config or {}).get(BASELINE_KEY)], metric, mode)


def compared_params(results) -> list[dict[str, Any]]:
    """The sampled hyperparameters of every search trial that reported an evaluation (each report carries the
    trial's best so far), the baseline's left out: the values the search compared."""
    return [{k: v for k, v in result.config.items() if k in SAMPLED_KEYS} for result in results
            if not (result.config or {}).get(BASELINE_KEY)
            and math.isfinite(best_of([(result.metrics or {}).get(BEST_SO_FAR)], "max"))]


def evaluated_trials(results) -> int:
    """The trials, the baseline's included, that reported at least one evaluation: the configurations compared."""
    return sum(math.isfinite(best_of([(result.metrics or {}).get(BEST_SO_FAR)], "max")) for result in results)


def kept_checkpoints(result) -> list[tuple[Any, dict[str, Any]]]:
    """A trial's kept checkpoints with the metrics of their evaluation. Tune keeps a single-process trial's. A
    data-parallel trial's are kept by Ray Train in the trial's own run folder (Tune gets only each one's path, as
    `checkpoint_path`): they are read from there, ranked the same way (search/tuning/distributed.py). A later
    checkpoint Tune did not register (the budget ended between its save and its result) is kept too, beside them."""
    if result.best_checkpoints:
        return [*result.best_checkpoints, *unregistered_after(result)]
    metrics = getattr(result, "metrics", None) or {}
    if not metrics.get(TRAIN_CHECKPOINT_PATH):
        return persisted_checkpoints(result)
    from ray.train import Result

    run = Result.from_path(str(Path(metrics[TRAIN_CHECKPOINT_PATH]).parent))
    trial = {"trial_id": metrics.get("trial_id", "")}  # Tune adds it to its results; Ray Train's have none
    return [(checkpoint, {**trial, **kept}) for checkpoint, kept in run.best_checkpoints or []]


def persisted_checkpoints(result) -> list[tuple[Any, dict[str, Any]]]:
    """The checkpoints a trial wrote to the sweep's storage that Tune never registered, read back from its folder.
    Tune registers a function trainable's checkpoint with a save call it schedules after the result that carries it;
    when the search's time budget ends between the two, the trial is stopped with the files in storage and the
    result logged, but none of it in `best_checkpoints` (seen on a GPU, where a trial's one evaluation came at the
    budget's end: the sweep had nothing to export). Stopped a moment earlier, the result is not logged either (seen
    on a CPU: result.json empty beside the checkpoint); that evaluation's metrics are then read from the Trainer's
    own record in the checkpoint (its trainer_state.json), so the trial still competes."""
    path = getattr(result, "path", None)
    folders = sorted(Path(path).glob("checkpoint_*")) if path else []
    if not folders:
        return []
    from ray.tune import Checkpoint, Result  # Tune's: read from result.json (Ray Train's reads its own snapshot file)

    logged = (Result.from_path(str(path)).best_checkpoints or []) if _has_results(Path(path)) else []
    by_folder = {Path(checkpoint.path).name: (checkpoint, metrics) for checkpoint, metrics in logged}
    trial = {"trial_id": Path(path).name.removeprefix(SEARCH_TRIAL_PREFIX)}
    kept = []
    for folder in folders:
        if folder.name not in by_folder and not weights_whole(folder):
            continue  # its copy into storage was cut short: nothing to export from
        checkpoint, metrics = by_folder.get(folder.name, (Checkpoint.from_directory(str(folder)), {}))
        kept.append((checkpoint, metrics or {**trial, **trainer_evaluation(folder)}))
    return kept


def weights_whole(folder: Path) -> bool:
    """Whether every safetensors file in a checkpoint folder holds all the bytes its header names. A checkpoint
    found in storage but never registered may have been cut mid-copy (its trial stopped, or the disk full): its
    trainer_state.json is whole and its weights are not, and the export would fail on them."""
    from safetensors import SafetensorError, safe_open

    for path in Path(folder).rglob("*.safetensors"):
        try:
            with safe_open(str(path), framework="numpy"):
                pass
        except (SafetensorError, OSError):
            return False
    return True


def unregistered_after(result) -> list[tuple[Any, dict[str, Any]]]:
    """The trial's checkpoints in storage that Tune never registered although it registered others, with the
    evaluation the Trainer recorded in each (seen on a CPU: the trials' budget ended between a trial's second save
    and its result, and the winner went on from its first checkpoint, 136 steps and 5 points behind the second)."""
    registered = {Path(checkpoint.path).name for checkpoint, _ in result.best_checkpoints}
    path = getattr(result, "path", None)
    if not path or {folder.name for folder in Path(path).glob("checkpoint_*")} <= registered:
        return []  # the usual case: every checkpoint in storage is Tune's (no result.json read again)
    return [(checkpoint, metrics) for checkpoint, metrics in persisted_checkpoints(result)
            if Path(checkpoint.path).name not in registered and "step" in metrics]


def _has_results(trial_folder: Path) -> bool:
    results = trial_folder / "result.json"
    return results.is_file() and results.stat().st_size > 0


def trainer_evaluation(checkpoint_folder: Path) -> dict[str, Any]:
    """The evaluation the Trainer logged at the step a checkpoint was saved ({} where it logged none): its eval_*
    metrics and the step, from the checkpoint's trainer_state.json."""
    states = sorted(checkpoint_folder.glob("**/trainer_state.json"))
    if not states:
        return {}
    state = json.loads(states[0].read_text())
    step = state.get("global_step")
    found = {key: value for entry in state.get("log_history", []) if entry.get("step") == step
             for key, value in entry.items() if key.startswith("eval_")}
    return {**found, "step": step} if found else {}
