"""One sweep, end to end: data -> probe -> MLflow parent run -> Ray Tune trials -> best -> export."""

from __future__ import annotations

import json
import logging
import platform
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from finesweep.search.disk import drop_optimizer_states
from finesweep.search.inputs import PreparedSweep, SweepFolder, prepare_data, sweep_folder
from finesweep.search.measure import Measured, measure_inputs, plan_trials
from finesweep.search.outputs.console import Console
from finesweep.search.outputs.logs import log_to_file
from finesweep.search.outputs.export import export_best
from finesweep.search.outputs.pareto_report import pick_export
from finesweep.search.outputs.plots import log_sweep_plots
from finesweep.search.outputs.variants import check_backends
from finesweep.search.budget import export_calibration
from finesweep.search.budget.pace import planned_times
from finesweep.search.budget.plan import SearchPlan, recorded_plan
from finesweep.search.probe.cores import usable_cores, warn_of_other_work
from finesweep.search.probe.device import Device
from finesweep.search.selection import arms
from finesweep.search.selection import baseline as baseline_comparison
from finesweep.search.selection.best import Best, baseline_of, compared_params, evaluated_trials
from finesweep.search.selection.edges import edge_warnings
from finesweep.search.tracking.client import Tracker, default_tracking_uri
from finesweep.search.tracking.export_record import record_export
from finesweep.search.tracking.spool import SPOOL_FOLDER
from finesweep.search.tracking.tags import (BEST_RUN_TAG, BEST_STEP_TAG, BEST_TRIAL_TAG, DEVICE_TAG, GIT_COMMIT_TAG,
                                            GIT_DIRTY_TAG, KIND_TAG, OUTCOME_TAG, PYTHON_TAG)
from finesweep.search.tuning import equal_time, exploit, exploit_outcome
from finesweep.search.tuning.context import TrialContext, planned_lengths
from finesweep.spaces import SweepConfig
from finesweep.spaces.files import write_json_atomic
from finesweep.spaces.config import ExportConfig
from finesweep.trainer import data as data_module
from finesweep.trainer.models import load_tokenizer

log = logging.getLogger(__name__)


def start_parent_run(config: SweepConfig, folder: SweepFolder, tracker: Tracker, device: Device) -> tuple[str, str]:
    experiment_id = tracker.experiment(config.tracking.experiment or config.name, folder.root / "mlartifacts")
    parent = tracker.start_run(experiment_id, f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", {KIND_TAG: "sweep"})
    tracker.log_params(parent, _flatten(config.model_dump(mode="json")))
    tracker.log_json(parent, config.model_dump(mode="json"), "sweep.json")
    tracker.set_tags(parent, {PYTHON_TAG: platform.python_version(), **_library_versions(), **_git_tags(Path.cwd()),
                              DEVICE_TAG: f"{device.count} x {device.kind} ({device.name})"})
    tracker.log_json(parent, _hardware(device), "hardware.json")
    return experiment_id, parent


def _hardware(device: Device) -> dict[str, Any]:
    """What the sweep ran on: the training device and the machine around it (`cpu_cores`: those this sweep may use,
    `machine_cpus`: the machine's)."""
    import os

    return {**asdict(device), "cpu_cores": usable_cores(), "machine_cpus": os.cpu_count(),
            "machine": platform.machine(), "system": platform.platform()}


@dataclass
class Session(Measured):
    """What the search and the export of one sweep share, whether it starts or resumes."""

    tracker: Tracker | None = None
    experiment_id: str = ""
    parent: str = ""
    plan: SearchPlan | None = None  # what the plan decided and predicted (a new sweep's; a resume keeps its own)
    exploitation: dict[str, Any] | None = None  # what training the winner further did (search.exploit), when it ran
    no_export_reason: str = ""  # why the search left nothing to export, and the fix (callbacks.no_evaluation_reason)
    # What the comparison with the baseline needs besides the test split (comparison_inputs): the recipe effect, the
    # training behind each arm, the equal-time run where search.baseline.budget is equal.
    comparison: dict[str, Any] | None = None
    compared: list[dict[str, Any]] = field(default_factory=list)  # the search's evaluated trials' hyperparameters
    configurations: dict[str, int] = field(default_factory=dict)  # the trials started and those that evaluated


def _open(config: SweepConfig, folder: SweepFolder, tracking_uri: str | None, console: Console,
          started: float | None = None, recorded_probes: dict[str, dict[str, Any]] | None = None,
          address: str | None = None) -> Session:
    """Data (cached by content, so a resume does not prepare it again), the probe's answers (a resume reads those
    the sweep started with) and the tracking store."""
    # From its checks on, the sweep logs to its file.
    inputs = measure_inputs(config, folder, console, started, recorded_probes, address)
    tracker = Tracker(tracking_uri or inputs.config.tracking.uri or default_tracking_uri(folder.root),
                      folder.root / SPOOL_FOLDER)
    return Session(**vars(inputs), tracker=tracker)


def run(config: SweepConfig, *, address: str | None = None, tracking_uri: str | None = None,
        console: Console | None = None, started: float | None = None) -> dict[str, Any]:
    """Run the whole sweep; returns the summary that is also written to <sweep>/summary.json. `started`: when the
    process started (time.time()'s clock: measure.process_started), from which search.time_limit counts."""
    session = _open(config, sweep_folder(config), tracking_uri, console or Console(), started, address=address)
    session.plan = plan_trials(session, address)
    session.experiment_id, session.parent = start_parent_run(session.config, session.folder, session.tracker,
                                                             session.device)
    session.tracker.log_json(session.parent, session.plan.to_dict(), "plan.json")
    for obj, name in ((session.data.prepared.report.to_dict(), "data_report.json"),
                      ({k: asdict(v) for k, v in session.probes.items()}, "probe.json"),
                      (session.data.lengths, "token_lengths.json")):
        session.tracker.log_json(session.parent, obj, name)
    if session.data.prepared.length_plot:
        session.tracker.log_file(session.parent, session.data.prepared.length_plot, "data")
    tune_experiment = tune_experiment_name()
    _save_state(session, tune_experiment)
    return _search_and_export(session, address, tune_experiment, resume=False)


def tune_experiment_name() -> str:
    """Its start time, to read, and a random suffix: the name also finds the trials' scratch folders in Ray's session
    folder at the sweep's end (scratch.remove_scratch_left_here), which sweeps on one Ray cluster share; two started
    in the same second (a script that launches several) would otherwise clear each other's."""
    return f"tune-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def resume(sweep_dir: Path, *, address: str | None = None, console: Console | None = None) -> dict[str, Any]:
    """Continue an interrupted sweep from its folder: Tune's experiment state, the same MLflow runs."""
    state = read_state(sweep_dir)
    config = SweepConfig.model_validate(state["config"])
    # A sweep started before the probe's answers were saved in its state (2026-11-28) is probed again.
    session = _open(config, SweepFolder(Path(state["root"])), state["tracking_uri"], console or Console(),
                    recorded_probes=state.get("probes"), address=address)
    session.experiment_id, session.parent = state["experiment_id"], state["parent_run_id"]
    # The plan the sweep started with: planning again would change its trials' lengths and number midway.
    session.plan = recorded_plan(state.get("plan") or {}, config)
    session.tracker.reopen(session.parent)
    session.console.step(f"Resuming the search from {state['tune_experiment']}")
    return _search_and_export(session, address, state["tune_experiment"], resume=True)


def read_state(sweep_dir: Path) -> dict[str, Any]:
    """What `run` recorded for later commands (resume, status, ui)."""
    path = Path(sweep_dir) / "sweep-state.json"
    if not path.is_file():
        raise FileNotFoundError(f"{sweep_dir}: no sweep has started here (no sweep-state.json)")
    return json.loads(path.read_text())


def _save_state(session: Session, tune_experiment: str) -> None:
    write_json_atomic(session.folder.state_file, {
        "root": str(session.folder.root), "config": session.config.model_dump(mode="json"),
        "tracking_uri": session.tracker.uri, "experiment_id": session.experiment_id,
        "parent_run_id": session.parent, "tune_experiment": tune_experiment, "plan": session.plan.to_dict(),
        "probes": {key: asdict(result) for key, result in session.probes.items()},
    }, indent=1)


def _update_state(session: Session, **fields: Any) -> None:
    """sweep-state.json with `fields` added (the phase a resume continues)."""
    write_json_atomic(session.folder.state_file, {**read_state(session.folder.root), **fields}, indent=1)


def _search_and_export(session: Session, address: str | None, tune_experiment: str, resume: bool) -> dict[str, Any]:
    tracker = session.tracker
    try:
        best, baseline = _search(session, address, tune_experiment, resume)
        summary = _finish(session, best, baseline)
    except BaseException:
        tracker.finish(session.parent, "FAILED")
        raise
    summary["wall_seconds"], summary["phase_seconds"] = session.clock.total, session.clock.phases
    summary["plan"] = session.plan.to_dict()
    predicted = ({"plan_predicted_wall_seconds": round(session.plan.predicted_wall_seconds, 1)}
                 if session.plan.combinations else {})
    tracker.log_metrics(session.parent, {"sweep_wall_seconds": summary["wall_seconds"], **predicted,
                                         **{f"phase_{phase}_seconds": s for phase, s in session.clock.phases.items()}}, 0)
    tracker.finish(session.parent)
    write_json_atomic(session.folder.root / "summary.json", summary)
    session.console.done(summary, tracker.uri, session.experiment_id)
    if note := tracker.spool_note(session.folder.root):
        session.console.warn(note)
    return summary


def _search(session: Session, address: str | None, tune_experiment: str, resume: bool):
    from finesweep.search.tuning.recovery import drop_runs_of_unsaved_trials
    from finesweep.search.tuning.callbacks import TrialEndRecorder, budget_end_state, no_evaluation_reason
    from finesweep.search.tuning.ray_cluster import start_ray
    from finesweep.search.tuning.scratch import remove_scratch_left_here
    from finesweep.search.tuning.tuner import TuneSetup, make_tuner, restore_tuner

    config, tracker, plan = session.config, session.tracker, session.plan
    context = TrialContext(
        sweep=config.model_dump(mode="json"), tokenized=session.data.tokenized,
        label_names=session.data.prepared.label_names,
        micro_batches={k: v.micro_batch for k, v in session.probes.items()},
        eval_batches={k: v.eval_batch_size for k, v in session.probes.items()}, tracking_uri=tracker.uri,
        experiment_id=session.experiment_id, parent_run_id=session.parent, spool_dir=str(tracker.spool.folder),
        checkpointing={k: v.gradient_checkpointing for k, v in session.probes.items()},
        **planned_lengths(plan), train_rows=session.data.prepared.report.splits.get("train", 0),
    )
    start_ray(address)
    if address is None and session.device.kind == "cpu":
        # The probe warns only when it measures; a cached probe's speeds were taken earlier. Kept on the parent run:
        # why a sweep's trials trained less than its plan said.
        if (other_work := warn_of_other_work()) is not None:
            tracker.log_metrics(session.parent, {"search_start_other_work_cores": other_work}, 0)
    session.console.search_start(config.search.algorithm, config.search.scheduler, config.search.plateau_patience)
    recorder = TrialEndRecorder(tracker.uri, context, plan.evaluations,
                                session.console.trial_event(config.search.metric))
    setup = TuneSetup(context, session.folder.tune, tune_experiment, session.precisions, [recorder], plan,
                      planned_times(plan))
    continuing = read_state(session.folder.root).get("exploitation") if resume else None
    started = time.time()
    if continuing:  # interrupted while the winner trained further: the trials are over, their results are kept
        results = restore_tuner(config, setup).get_results()
    else:
        if resume:
            drop_runs_of_unsaved_trials(tracker, context, setup.storage / tune_experiment)
        results = (restore_tuner(config, setup) if resume else make_tuner(config, setup)).fit()
        remove_scratch_left_here(tune_experiment)
        recorder.close_unfinished(budget_end_state(config, results))
    explored = None if resume else time.time() - started  # a resumed search's wall time here is not its own
    log_sweep_plots(config, tracker, session.experiment_id, session.parent, session.precisions,
                    session.folder.root / "plots", session.console.warn)
    # With search.second_objective: the Pareto front printed and logged, and the trial search.pick names.
    best = pick_export(results, config.search, tracker, session.parent, session.console, session.folder.root)
    session.no_export_reason = "" if best else no_evaluation_reason(plan, results)
    best = _exploit(session, setup, best, results, explored, continuing)
    session.console.leaderboard(tracker, session.experiment_id, session.parent, config.search.metric, config.search.mode)
    session.clock.lap("search")
    baseline = baseline_of(results, config.search.metric, config.search.mode)
    session.configurations = {"evaluated": evaluated_trials(results), "started": len(results)}
    session.console.compared(**session.configurations, baseline=baseline is not None)
    session.compared = compared_params(results)
    if best is not None and baseline is not None:
        session.comparison = comparison_inputs(session, results, best, baseline)
        # The search's whole wall time beside the arms' (a resumed search's clock here is not its own).
        session.comparison["search_seconds"] = None if resume else session.clock.phases.get("search")
        own_checkpoint = (best.trial_id, best.step) == (baseline.trial_id, baseline.step)
        if config.search.baseline_budget == "equal" and own_checkpoint:
            session.console.step("The baseline recipe is not trained again: the export is its own checkpoint")
        elif config.search.baseline_budget == "equal":
            _train_baseline_again(session, setup, results, baseline, resume)
    return best, baseline


def comparison_inputs(session: Session, results, best: Best, baseline: Best) -> dict[str, Any]:
    """The recipe effect (the export's trial against the baseline's at equal training, on validation) and the
    samples and seconds behind each arm, from Tune's results (selection/arms.py)."""
    config = session.config
    histories = exploit.histories(results, config.search.metric)
    exported = {**best.as_dict(), "exploitation": session.exploitation}
    return {"recipe_effect": baseline_comparison.paired_with(histories, exported, baseline.trial_id,
                                                             config.search.mode),
            "arms": {"export": arms.export_arm(exported, session.exploitation, histories).as_dict(),
                     "baseline": arms.trial_arm(baseline.as_dict(), histories).as_dict()},
            "mode": config.search.mode, "validation_rows": session.data.prepared.report.splits.get("validation", 0)}


def _train_baseline_again(session: Session, setup, results, baseline: Best, resume: bool) -> None:
    """search.baseline.budget equal: the baseline recipe trained for the export's seconds (tuning/equal_time.py),
    recorded in sweep-state.json before it starts so that a resume goes on with it; its checkpoint becomes the
    baseline arm the test split scores."""
    comparison = session.comparison
    recorded = read_state(session.folder.root).get("equal_time") if resume else None
    seconds = recorded["seconds"] if recorded else comparison["arms"]["export"]["seconds"]
    done = equal_time.train_baseline_again(
        session.config, setup, baseline, results, seconds, session.tracker.uri, session.console,
        resuming=recorded is not None, save=lambda record: _update_state(session, equal_time=record))
    comparison["equal_time"] = done
    if checkpoint := done.get("checkpoint"):
        comparison["arms"]["baseline"] = arms.Arm(arms.samples(checkpoint), done["trained_seconds"]).as_dict()
    session.clock.lap("equal_time_baseline")


def _exploit(session: Session, setup, winner: Best | None, results, explored: float | None,
             continuing: dict[str, Any] | None) -> Best | None:
    """The rest of the time budget to the search's winner (search/tuning/exploit.py): the better of its best
    checkpoint and its continuation's. The continuation is recorded in sweep-state.json before it starts, so a
    resume after a crash goes on with it, and its outcome once it has ended, so a resume after a later crash (in the
    equal-time baseline's run, say) reads it rather than training it again."""
    if winner is None or not exploit.applies(session.plan):
        return winner
    resumed = explored is None
    if resumed and "exploited" in (state := read_state(session.folder.root)):  # it had ended before the crash
        session.exploitation = state["exploited"]["record"]
        return Best.from_dict(state["exploited"]["pick"])
    final, session.exploitation = exploit.continue_winner(
        session.config, setup, winner, results, explored, continuing, session.tracker.uri,
        session.console, lambda record: _update_state(session, exploitation=record),
        validation_rows=session.data.prepared.report.splits.get("validation", 0),
        train_rows=session.data.prepared.report.splits.get("train", 0))
    _update_state(session, exploited={"record": session.exploitation, "pick": final.as_dict()})
    if session.exploitation:  # the real split of the budget, beside the plan's on the parent run
        done = session.exploitation
        split = {"exploitation_seconds": exploit_outcome.trained_seconds(done), **(
            {"exploration_seconds": done["exploration_seconds"]} if done["exploration_seconds"] is not None else {})}
        session.tracker.log_metrics(session.parent, split, 0)
    return final


def _finish(session: Session, best, baseline=None) -> dict[str, Any]:
    tracker, parent, console = session.tracker, session.parent, session.console
    if best is None:
        tracker.set_tags(parent, {OUTCOME_TAG: "no trial produced an evaluation"})
        console.warn(session.no_export_reason or "No trial reported an evaluation: nothing to export.")
        return {"best": None}
    tracker.set_tags(parent, {BEST_RUN_TAG: best.mlflow_run_id, BEST_STEP_TAG: best.step, BEST_TRIAL_TAG: best.trial_id})
    tracker.log_metrics(parent, {f"best_{best.metric}": best.value}, best.step)
    baseline_won = baseline is not None and baseline.trial_id == baseline_comparison.origin(
        {"trial_id": best.trial_id, "exploitation": session.exploitation})  # a continuation's is its source's
    edges = [] if baseline_won else edge_warnings(best.params, session.config.space,  # the baseline is off-space
                                                  session.compared)
    exported = export_winner(session.config, session.folder, session.data, best, console, baseline, edges,
                             session.exploitation, session.comparison, len(session.compared), session.plan.export)
    registered = record_export(session.config, tracker, session.experiment_id, parent, exported, best, console)
    export_calibration.learn(session.plan, exported.seconds, exported.not_made)  # the next plan's estimate
    session.clock.lap("export")
    freed = _free_optimizer_states(session)
    return {"best": best.as_dict(), "export_dir": str(exported.folder), "test_metrics": exported.metrics,
            "deploy": exported.deploy, "warnings": exported.warnings, "registered": registered,
            "export_complete": not exported.not_made, "export_not_made": exported.not_made,
            "baseline": exported.baseline or None, "baseline_trial": baseline.as_dict() if baseline else None,
            "edge_warnings": edges, "exploitation": session.exploitation, "comparison": session.comparison,
            "configurations": session.configurations,
            "export_steps": _against_plan(exported.seconds, session.plan), "optimizer_state_bytes_freed": freed}


def _free_optimizer_states(session: Session) -> int:
    """After the export nothing of the sweep trains any more: the checkpoints' optimizer state goes unless
    search.keep_optimizer_state keeps it (search/disk.py), and the console says how much that freed."""
    if session.config.search.keep_optimizer_state:
        return 0
    freed = drop_optimizer_states(session.folder.tune)
    if freed:
        session.console.step(f"Freed {freed / 2**30:.2f} GiB: the checkpoints' optimizer state, which only training "
                             "on from them would read (search.keep_optimizer_state: true keeps it)")
    return freed


def _against_plan(seconds: dict[str, float], plan: SearchPlan) -> dict[str, dict[str, float | None]]:
    """Each export step's seconds beside the plan's prediction for it (None: the plan predicted none, or a resumed
    sweep's older plan did not break the export down)."""
    predicted = plan.export_steps
    return {step: {"seconds": taken, "predicted": predicted.get(step)} for step, taken in seconds.items()}


def reexport(sweep_dir: Path, quantization: list[str] | None, out_dir: Path | None,
             console: Console | None = None):
    """Export a finished sweep's best checkpoint again, with other quantizations or into another folder."""
    console = console or Console()
    state = read_state(sweep_dir)
    folder = SweepFolder(Path(state["root"]))
    log_to_file(folder.log_file)
    summary_file = folder.root / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    saved = summary.get("best")
    if not saved:
        raise FileNotFoundError(f"{folder.root}: the sweep has no best checkpoint yet (no summary.json with a best trial)")
    config = SweepConfig.model_validate(state["config"])
    updates = {"quantization": quantization} if quantization else {}
    if out_dir:
        updates["output_dir"] = str(out_dir.resolve())
    config = SweepConfig.model_validate({**config.model_dump(mode="json"),
                                         "export": {**config.export.model_dump(mode="json"), **updates}})
    best = Best.from_dict(saved)
    check_backends(config)
    baseline = Best.from_dict(summary["baseline_trial"]) if summary.get("baseline_trial") else None
    exported = export_winner(config, folder, prepare_data(config, folder, console), best, console, baseline,
                             summary.get("edge_warnings"), summary.get("exploitation"), summary.get("comparison"),
                             (summary.get("baseline") or {}).get("searched_trials"))
    record_export(config, Tracker(state["tracking_uri"]), state["experiment_id"], state["parent_run_id"], exported,
                  best, console)
    return exported


def export_winner(config: SweepConfig, folder: SweepFolder, data: PreparedSweep, best, console: Console,
                  baseline=None, edges: list[str] | None = None, exploitation: dict[str, Any] | None = None,
                  comparison: dict[str, Any] | None = None, searched: int | None = None,
                  export: ExportConfig | None = None):
    """`comparison` (comparison_inputs, with the equal-time run's record where it ran) and `searched` (the space's
    trials that reported an evaluation): for the comparison with the baseline (selection/baseline.py::compare).
    `export`: the export as the plan fitted it (None: the file's, for a re-export)."""
    name = baseline_comparison.export_name({"trial_id": best.trial_id, "exploitation": exploitation})
    console.step(f"Exporting the best checkpoint ({name}, step {best.step}) and quantizing")
    tokenizer = load_tokenizer(config.candidate(best.model), config.trust_remote_code,
                               text_pairs=config.data.text_pair_column is not None)
    test_split = data_module.load_tokenized(Path(data.tokenized[best.model]))["test"]
    result = export_best(config=config, checkpoint_dir=best.checkpoint_dir, tokenizer_source=best.checkpoint_dir,
                         test_split=test_split, collate=data_module.collator(tokenizer, config.data.task),
                         best={**best.as_dict(), **({"exploitation": exploitation} if exploitation else {})},
                         out_dir=folder.export_dir(config), label_names=data.prepared.label_names,
                         log_file=folder.log_file,
                         baseline={**baseline.as_dict(), **(comparison or {}), "searched_trials": searched}
                         if baseline else None,
                         search_warnings=edges, chat_format=data.prepared.report.chat_format, export=export)
    console.export_table(result)
    return result


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, (list, dict)) else value
    return flat


def _git_tags(folder: Path) -> dict[str, str]:
    """The commit of the user's project (the folder the sweep runs from), MLflow's standard tag, when it is a git
    checkout; whether it had uncommitted changes. Nothing when it is not (or git is missing)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {}
    return {GIT_COMMIT_TAG: commit, GIT_DIRTY_TAG: str(bool(git("status", "--porcelain")))}


def _library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("torch", "transformers", "ray", "optuna", "mlflow", "peft", "bitsandbytes", "datasets"):
        try:
            versions[f"finesweep.version.{name}"] = version(name)
        except PackageNotFoundError:
            pass
    return versions

