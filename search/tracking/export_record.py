"""The export on the sweep's parent run: its test metrics, the deploy pick, the baseline comparison, the model card,
metrics.json and a causal LM's generations, and its variants in the model registry (export.register_model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from finesweep.search.outputs.console import Console
from finesweep.search.selection.deploy import CPU_PREFIX
from finesweep.search.tracking.client import Tracker
from finesweep.search.tracking.registry import register_export
from finesweep.search.tracking.tags import (BASELINE_FOOTING_TAG, BASELINE_TRIAL_TAG, DEPLOY_CPU_TAG, DEPLOY_TAG,
                                            EXPORT_COMPLETE_TAG)
from finesweep.spaces import SweepConfig


def record_export(config: SweepConfig, tracker: Tracker, experiment_id: str, parent: str, exported, best,
                  console: Console) -> list[str]:
    """The export's test metrics, model card and metrics.json on the parent run, and its variants registered
    (when export.register_model). Returns the registered model URIs. A registry that refuses (an old server, a
    file store) costs a warning, never the export on disk."""
    for variant, metrics in exported.metrics.items():
        tracker.log_metrics(parent, {f"test_{variant}_{k}": v for k, v in metrics.items()}, 0)
    record_deploy(tracker, parent, exported.deploy, console)
    tracker.log_metrics(parent, {f"export_seconds_{step}": taken for step, taken in exported.seconds.items()}, 0)
    tracker.set_tags(parent, {EXPORT_COMPLETE_TAG: str(not exported.not_made).lower()})
    if exported.baseline:
        _record_baseline(tracker, parent, exported.baseline, console)
    tracker.log_file(parent, exported.folder / "README.md", "export")
    tracker.log_file(parent, exported.folder / "metrics.json", "export")
    if exported.generations is not None:
        _log_generations(tracker, parent, exported.generations)
    if not config.export.register_model:
        return []
    try:
        versions = register_export(config, tracker, experiment_id, parent, exported.folder, exported.metrics,
                                   best.as_dict())
    except Exception as error:  # noqa: BLE001 - the export folder is the deliverable; the registry is a copy
        console.warn(f"export: the model registry at {tracker.uri} refused the export ({type(error).__name__}: "
                     f"{error}); the export folder {exported.folder} is complete. Set export.register_model: false to skip.")
        return []
    console.step("Registered " + ", ".join(f"{v.model_uri} ({v.variant})" for v in versions))
    return [v.model_uri for v in versions]


def record_deploy(tracker: Tracker, parent: str, deploy: dict[str, Any], console: Console) -> None:
    """The variant to serve, on the parent run (a tag, and its speed-ups as metrics: deploy_speedup_batch1, ...) and
    on the console."""
    if not deploy:
        return
    on_cpu = deploy.get("on_cpu") or {}
    tracker.set_tags(parent, {DEPLOY_TAG: deploy["variant"], **({DEPLOY_CPU_TAG: on_cpu["variant"]} if on_cpu else {})})
    speedups = {f"deploy_{prefix}{key}": value for prefix, choice in (("", deploy), (CPU_PREFIX, on_cpu))
                for key, value in choice.items() if key.startswith("speedup_") and value}
    if speedups:
        tracker.log_metrics(parent, speedups, 0)
    console.step(f"Deploy: {deploy['variant']} ({deploy['reason']})")
    if on_cpu:
        console.step(f"Deploy on a CPU: {on_cpu['variant']} ({on_cpu['reason']})")


def _record_baseline(tracker: Tracker, parent: str, baseline: dict[str, Any], console: Console) -> None:
    """The comparison with the baseline on the parent run, each effect under its own name so that no figure reads as
    a gain it is not: baseline_test_* and baseline_<validation metric>; test_difference_<metric> (and its interval's
    _low, _high), named equal_time_gain_<metric> only where the baseline trained for the export's seconds; the samples
    and seconds behind each arm; recipe_effect_<validation metric> (tuned, baseline, difference) and
    training_effect_<validation metric>; a causal LM's untuned_test_*, a classifier's majority_class_test_*; the
    footing and the baseline trial as tags. Each sentence on the console."""
    name, validation = baseline["metric"], next(iter(baseline["validation"]))
    metrics = {f"baseline_test_{key}": value for key, value in baseline["test"].items()}
    metrics.update({f"baseline_{key}": value for key, value in baseline["validation"].items()})
    difference = f"equal_time_gain_{name}" if baseline["gain"] is not None else f"test_difference_{name}"
    metrics[difference] = baseline["difference"]
    if interval := baseline.get("difference_interval"):  # 95% over the test rows (paired bootstrap)
        metrics[f"{difference}_low"], metrics[f"{difference}_high"] = interval
    for arm, trained in (baseline.get("arms") or {}).items():
        metrics.update({f"{arm}_training_samples": trained["samples"], f"{arm}_training_seconds": trained["seconds"]})
    if recipe := baseline.get("recipe_effect"):
        metrics.update({f"recipe_effect_{validation}_tuned": recipe["tuned"],
                        f"recipe_effect_{validation}_baseline": recipe["baseline"],
                        f"recipe_effect_{validation}": recipe["difference"]})
    if training := baseline.get("training_effect"):
        metrics[f"training_effect_{validation}"] = training["difference"]
    metrics.update({f"untuned_test_{key}": value for key, value in (baseline.get("untuned_test") or {}).items()})
    metrics.update({f"majority_class_test_{key}": value for key, value in (baseline.get("floor") or {}).items()})
    tracker.log_metrics(parent, metrics, 0)
    tracker.set_tags(parent, {BASELINE_TRIAL_TAG: baseline["trial_id"], BASELINE_FOOTING_TAG: baseline["footing"]})
    for sentence in baseline["sentences"]:
        console.step(sentence)


def _log_generations(tracker: Tracker, parent: str, path: Path) -> None:
    """generations.json on the parent run, and its answers as an MLflow table (one row per prompt, a column per
    variant), which the UI shows side by side."""
    tracker.log_file(parent, path, "export")
    examples = json.loads(path.read_text(encoding="utf-8"))["examples"]
    columns = {name: [row.get(name, "") for row in examples] for name in examples[0]}
    tracker.log_table(parent, columns, "export/generations_table.json")
