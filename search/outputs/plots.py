"""The sweep's plots, drawn by Optuna from the tracking store and logged on the parent run under `plots/`.

The trials are read back from MLflow (not from Tune's or Optuna's memory), so the plots are the same for a
local SQLite store and a team server, and after a resume. They are replayed into an in-memory Optuna study
through the sweep's own space function, so every parameter has exactly the sweep's distribution.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.tags import TRIAL_TAG
from finesweep.spaces import SweepConfig, suggest
from finesweep.spaces.space import BASELINE_KEY, categorical_choices, float_ranges

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

PLOT_FOLDER = "plots"  # artifact folder on the parent run


@dataclass(frozen=True)
class TrialCurve:
    """One trial as the tracking store holds it: its logged parameters and its evaluations, by step."""

    run_id: str
    name: str
    params: dict[str, str]  # as logged: every value a string
    evaluations: list[tuple[int, float]]  # (step, metric value), ascending steps, finite values only


def log_sweep_plots(config: SweepConfig, tracker: Tracker, experiment_id: str, parent_run_id: str,
                    precisions: list[str], out_dir: Path, warn: Callable[[str], None] = log.warning) -> list[Path]:
    """Draw the sweep's plots into `out_dir` and log them on the parent run; returns the PNGs written.

    A plot Optuna cannot draw is skipped with a one-line warning (one that would mean nothing is left out quietly);
    nothing here ever fails the sweep."""
    try:
        curves = trial_curves(tracker, experiment_id, parent_run_id, config.search.metric)
        study = replay_study(config, curves, precisions, warn)
        if not study.trials:
            warn("sweep plots skipped: " + ("no trial reported an evaluation" if not curves else
                                            "no evaluated trial is a point of the space (the baseline's recipe "
                                            "need not be one)"))
            return []
        paths = draw_plots(study, config.search.metric, Path(out_dir), warn)
        for path in paths:
            tracker.log_file(parent_run_id, path, PLOT_FOLDER)
        return paths
    except Exception as error:  # the plots are a report on the sweep, never a reason for it to fail
        warn(f"sweep plots skipped: {type(error).__name__}: {error}")
        return []


def trial_curves(tracker: Tracker, experiment_id: str, parent_run_id: str, metric: str) -> list[TrialCurve]:
    """The sweep's trial runs with at least one evaluation of `metric`, in the order they started."""
    curves = []
    runs = [r for r in tracker.trial_runs(experiment_id, parent_run_id) if TRIAL_TAG in r.data.tags]
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        by_step = {m.step: m.value for m in tracker.metric_history(run.info.run_id, metric)
                   if math.isfinite(m.value)}  # a step logged twice (a resumed trial) counts once
        if by_step:
            curves.append(TrialCurve(run.info.run_id, run.info.run_name or run.data.tags[TRIAL_TAG],
                                     dict(run.data.params), sorted(by_step.items())))
    return curves


def typed_params(logged: dict[str, str], config: SweepConfig, precisions: list[str]) -> dict[str, Any]:
    """The logged strings mapped back to the space's values; a value outside the space is left out."""
    typed: dict[str, Any] = {}
    for name, choices in categorical_choices(config.space, config.model_names, precisions).items():
        match = [c for c in choices if str(c) == logged.get(name)]
        if match:
            typed[name] = match[0]
    for name in float_ranges(config.space):
        if logged.get(name) not in (None, "None"):  # "None": a dropout left at the checkpoint's own (the baseline)
            typed[name] = float(logged[name])
    return typed


def replay_study(config: SweepConfig, curves: list[TrialCurve], precisions: list[str],
                 warn: Callable[[str], None] = log.warning) -> "optuna.Study":
    """An in-memory study with one finished trial per curve: the sweep's distributions, each evaluation
    reported at its step, and the trial's best evaluation as its value (the sweep picks over all of them)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = "maximize" if config.search.mode == "max" else "minimize"
    study = optuna.create_study(direction=direction, sampler=optuna.samplers.RandomSampler(seed=config.seed))
    space = functools.partial(suggest, space=config.space, models=config.model_names, precisions=precisions)
    for curve in curves:
        params = typed_params(curve.params, config, precisions)
        if not _fits_space(space, params):
            # The baseline's recipe need not be a point of the space (a dropout left at the checkpoint's own is none).
            say = log.info if curve.params.get(BASELINE_KEY) == "True" else warn
            say(f"sweep plots: trial {curve.name} left out, its logged parameters are not a point of the space")
            continue
        study.enqueue_trial(params)
        trial = study.ask()
        space(trial)
        trial.set_user_attr("mlflow_run_id", curve.run_id)
        trial.set_user_attr("name", curve.name)
        for step, value in curve.evaluations:
            trial.report(value, step)
        values = [value for _, value in curve.evaluations]
        study.tell(trial, max(values) if config.search.mode == "max" else min(values))
    return study


def _fits_space(space: Callable[..., Any], params: dict[str, Any]) -> bool:
    """Whether every parameter the space samples for this point is known (otherwise Optuna would invent it)."""
    import optuna

    try:
        space(optuna.trial.FixedTrial(params))
    except ValueError:  # FixedTrial raises for a parameter it was not given
        return False
    return True


def draw_plots(study: "optuna.Study", metric: str, out_dir: Path,
               warn: Callable[[str], None] = log.warning) -> list[Path]:
    """One PNG per plot into `out_dir`; a plot Optuna cannot draw is skipped with a warning, one that would mean
    nothing here (MeansNothing) is left out with a line in the log file."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import optuna.visualization.matplotlib as optuna_plots

    drawers: dict[str, Callable[[], Any]] = {
        "optimization_history": lambda: _optimization_history(study, metric, optuna_plots),
        "parallel_coordinate": lambda: _parallel_coordinate(study, metric, optuna_plots),
        "param_importances": lambda: optuna_plots.plot_param_importances(
            study, params=_importance_params(study), target_name=metric),
        "learning_curves": lambda: _learning_curves(study, metric, optuna_plots),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in drawers.items():
        # Optuna's plots switch matplotlib's style globally and warn that they are experimental: contain both.
        with matplotlib.rc_context(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                written.append(_save(_figure(draw()), out_dir / f"{name}.png"))
            except MeansNothing as reason:  # not a fault: the sweep's log file says why, the console stays quiet
                log.info("sweep plot %s left out: %s", name, reason)
            except Exception as error:
                warn(f"sweep plot {name} skipped: {type(error).__name__}: {error}")
    return written


def _optimization_history(study: "optuna.Study", metric: str, optuna_plots: Any) -> Any:
    from matplotlib.ticker import MaxNLocator

    axes = optuna_plots.plot_optimization_history(study, target_name=metric)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # trial numbers, not 0.5 steps
    return axes


def _parallel_coordinate(study: "optuna.Study", metric: str, optuna_plots: Any) -> Any:
    axes = optuna_plots.plot_parallel_coordinate(study, target_name=metric)
    dimensions = len({name for trial in study.trials for name in trial.params}) + 1
    axes.figure.set_size_inches(max(6.4, 1.2 * dimensions), 5)  # room for every axis' tick labels
    return axes


class MeansNothing(ValueError):
    """A plot that would say nothing about this sweep (importances of one trial, or of one varying parameter: the
    quickstart's time-limited trials often vary the learning rate alone)."""


def _importance_params(study: "optuna.Study") -> list[str]:
    """The parameters that vary between trials; raises where importances would mean nothing (Optuna would
    still draw equal bars for one trial, or a lone 100% bar for one varying parameter)."""
    trials = study.get_trials(deepcopy=False)
    if len(trials) < 2:
        raise MeansNothing(f"importances need at least 2 trials with an evaluation, but the sweep has {len(trials)}")
    values: dict[str, set[str]] = {}
    for trial in trials:
        for name, value in trial.params.items():
            values.setdefault(name, set()).add(repr(value))
    varying = sorted(name for name, seen in values.items() if len(seen) > 1)
    if len(varying) < 2:
        raise MeansNothing(f"importances need at least 2 parameters that vary between trials, but got {varying or 'none'}")
    return varying


def _learning_curves(study: "optuna.Study", metric: str, optuna_plots: Any) -> Any:
    """Optuna's intermediate values, with the axes named and each line named after its MLflow run."""
    axes = optuna_plots.plot_intermediate_values(study)
    names = {f"Trial{t.number}": t.user_attrs.get("name", f"Trial{t.number}") for t in study.trials}
    for line in axes.get_lines():
        line.set_label(names.get(line.get_label(), line.get_label()))
    if len(study.trials) >= 2:
        axes.legend(bbox_to_anchor=(1.05, 1), loc="upper left", borderaxespad=0.0, fontsize="small")
    axes.set(title="Learning curves", xlabel="Step", ylabel=metric)
    return axes


def _figure(drawn: Any) -> Any:
    """The figure of what an Optuna plot returned (an Axes, or an array of them)."""
    first = drawn.flat[0] if hasattr(drawn, "flat") else drawn
    return first.figure


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        figure.savefig(path, dpi=100, bbox_inches="tight")  # tight: Optuna puts legends outside the axes
    finally:
        plt.close(figure)
    return path
