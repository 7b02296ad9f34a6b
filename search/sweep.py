"""One sweep, end to end: data -> probe -> MLflow parent run -> Ray Tune trials -> best -> export."""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from finesweep.search.device import Device, resolve_device, usable_precisions
from finesweep.search.report import Console
from finesweep.search.tracking import Tracker, default_tracking_uri
from finesweep.spaces import SweepConfig

log = logging.getLogger(__name__)


@dataclass
class SweepFolder:
    """Where a sweep keeps everything: <output_root>/<name>/."""

    root: Path

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def tune(self) -> Path:
        return self.root / "tune"

    @property
    def probe_file(self) -> Path:
        return self.cache / "probe.json"

    @property
    def state_file(self) -> Path:
        return self.root / "sweep-state.json"

    def export_dir(self, config: SweepConfig) -> Path:
        return Path(config.export.output_dir) if config.export.output_dir else self.root / "export"


def sweep_folder(config: SweepConfig) -> SweepFolder:
    return SweepFolder(Path(config.output_root).resolve() / config.name)


@dataclass
class PreparedSweep:
    """Data and tokenized splits for every candidate model."""

    prepared: Any  # trainer.data.PreparedData
    tokenized: dict[str, str]
    max_seq_len: int
    lengths: dict[str, dict[str, float]] = field(default_factory=dict)


def prepare_data(config: SweepConfig, folder: SweepFolder, console: Console) -> PreparedSweep:
    """Load, clean, split; then tokenize once per candidate (cached by content)."""
    from finesweep.trainer import data, models
    from finesweep.trainer.lengths import covering_length, length_percentiles

    prepared = data.prepare(config.data, config.seed, folder.cache)
    console.data_report(prepared.report)
    tokenizers = {name: models.load_tokenizer(config.candidate(name), config.trust_remote_code) for name in config.model_names}
    lengths = {name: length_percentiles(prepared.folder, tok, config.data.task) for name, tok in tokenizers.items()}
    max_seq_len = config.data.max_seq_len or max(
        covering_length(lengths[name], _model_limit(tok)) for name, tok in tokenizers.items())
    tokenized = {name: str(data.tokenize(prepared, tok, config.data.task, max_seq_len, folder.cache))
                 for name, tok in tokenizers.items()}
    console.lengths(lengths, max_seq_len)
    return PreparedSweep(prepared, tokenized, max_seq_len, lengths)


def _model_limit(tokenizer) -> int | None:
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 1_000_000 else None


def probe(config: SweepConfig, folder: SweepFolder, device: Device, precisions: list[str],
          data: PreparedSweep, console: Console) -> dict[str, Any]:
    from finesweep.search.probe import probe_all

    labels = len(data.prepared.label_names or []) or 2
    results = probe_all(config, device, precisions, data.max_seq_len, labels, folder.probe_file)
    console.probe_table(results)
    return results


def start_parent_run(config: SweepConfig, folder: SweepFolder, tracker: Tracker) -> tuple[str, str]:
    experiment_id = tracker.experiment(config.tracking.experiment or config.name, folder.root / "mlartifacts")
    parent = tracker.start_run(experiment_id, f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", {"finesweep.kind": "sweep"})
    tracker.log_params(parent, _flatten(config.model_dump(mode="json")))
    tracker.log_json(parent, config.model_dump(mode="json"), "sweep.json")
    tracker.set_tags(parent, {"finesweep.python": platform.python_version(), **_library_versions()})
    return experiment_id, parent


def run(config: SweepConfig, *, address: str | None = None, tracking_uri: str | None = None,
        console: Console | None = None) -> dict[str, Any]:
    """Run the whole sweep; returns the summary that is also written to <sweep>/summary.json."""
    console = console or Console()
    started = time.perf_counter()
    folder = sweep_folder(config)
    folder.root.mkdir(parents=True, exist_ok=True)
    device = resolve_device()
    precisions = usable_precisions([p.value for p in config.space.precision], device)
    console.header(config, device, folder.root)
    data = prepare_data(config, folder, console)
    probes = probe(config, folder, device, precisions, data, console)

    tracker = Tracker(tracking_uri or config.tracking.uri or default_tracking_uri(folder.root))
    experiment_id, parent = start_parent_run(config, folder, tracker)
    tracker.log_json(parent, data.prepared.report.to_dict(), "data_report.json")
    tracker.log_json(parent, {k: asdict(v) for k, v in probes.items()}, "probe.json")
    tracker.log_json(parent, data.lengths, "token_lengths.json")
    try:
        best, results = _search(config, folder, data, probes, precisions, tracker, experiment_id, parent, address, console)
        summary = _finish(config, folder, data, best, tracker, parent, console)
    except BaseException:
        tracker.finish(parent, "FAILED")
        raise
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    tracker.log_metrics(parent, {"sweep_wall_seconds": summary["wall_seconds"]}, 0)
    tracker.finish(parent)
    (folder.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    console.done(summary, tracker.uri, experiment_id)
    return summary


def _search(config, folder, data, probes, precisions, tracker, experiment_id, parent, address, console):
    from finesweep.search.best import pick_best
    from finesweep.search.trainable import TrialContext
    from finesweep.search.tune import TrialEndRecorder, TuneSetup, make_tuner, start_ray

    context = TrialContext(
        sweep=config.model_dump(mode="json"), tokenized=data.tokenized, label_names=data.prepared.label_names,
        micro_batches={k: v.max_micro_batch for k, v in probes.items()}, tracking_uri=tracker.uri,
        experiment_id=experiment_id, parent_run_id=parent,
    )
    start_ray(address)
    evaluations = max(1, config.search.max_steps // config.search.eval_every_steps)
    recorder = TrialEndRecorder(tracker.uri, context, evaluations, console.trial_event(config.search.metric))
    setup = TuneSetup(context, folder.tune, f"tune-{time.strftime('%Y%m%d-%H%M%S')}", precisions, [recorder])
    folder.state_file.write_text(json.dumps({"parent_run_id": parent, "experiment_id": experiment_id,
                                             "tune_experiment": str(folder.tune / setup.experiment_name)}))
    results = make_tuner(config, setup).fit()
    recorder.close_unfinished("stopped_by_time_budget")
    best = pick_best(results, config.search.metric, config.search.mode)
    console.leaderboard(tracker, experiment_id, parent, config.search.metric, config.search.mode)
    return best, results


def _finish(config, folder, data, best, tracker: Tracker, parent: str, console: Console) -> dict[str, Any]:
    if best is None:
        tracker.set_tags(parent, {"finesweep.outcome": "no trial produced an evaluation"})
        console.warn("No trial reported an evaluation: nothing to export. See the failed trials above.")
        return {"best": None}
    tracker.set_tags(parent, {"finesweep.best_run_id": best.mlflow_run_id, "finesweep.best_step": best.step,
                              "finesweep.best_trial": best.trial_id})
    tracker.log_metrics(parent, {f"best_{best.metric}": best.value}, best.step)
    exported = export(config, folder, data, best, console)
    for variant, metrics in exported.metrics.items():
        tracker.log_metrics(parent, {f"test_{variant}_{k}": v for k, v in metrics.items()}, 0)
    tracker.log_file(parent, exported.folder / "README.md", "export")
    tracker.log_file(parent, exported.folder / "metrics.json", "export")
    return {"best": best.as_dict(), "export_dir": str(exported.folder), "test_metrics": exported.metrics,
            "warnings": exported.warnings}


def export(config: SweepConfig, folder: SweepFolder, data: PreparedSweep, best, console: Console):
    from finesweep.search.export import export_best
    from finesweep.trainer import data as data_module
    from finesweep.trainer.models import load_tokenizer

    console.step(f"Exporting the best checkpoint (trial {best.trial_id}, step {best.step}) and quantizing")
    tokenizer = load_tokenizer(config.candidate(best.model), config.trust_remote_code)
    test_split = data_module.load_tokenized(Path(data.tokenized[best.model]))["test"]
    result = export_best(config=config, checkpoint_dir=best.checkpoint_dir, tokenizer_source=best.checkpoint_dir,
                         test_split=test_split, collate=data_module.collator(tokenizer, config.data.task),
                         best=best.as_dict(), out_dir=folder.export_dir(config), label_names=data.prepared.label_names)
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


def _library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("torch", "transformers", "ray", "optuna", "mlflow", "peft", "bitsandbytes", "datasets"):
        try:
            versions[f"finesweep.version.{name}"] = version(name)
        except PackageNotFoundError:
            pass
    return versions

