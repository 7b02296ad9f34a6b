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
from finesweep.search.tracking.tags import BASELINE_TRIAL_TAG, DEPLOY_CPU_TAG, DEPLOY_TAG, EXPORT_COMPLETE_TAG
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
    """The baseline on the parent run (baseline_test_* and baseline_<validation metric> metrics, the gain and its
    interval's ends (_low, _high), a causal LM's untuned_test_*, equal_samples_{tuned,baseline}_<validation metric>,
    the trial's tag) and the comparison on the console."""
    metrics = {f"baseline_test_{name}": value for name, value in baseline["test"].items()}
    metrics.update({f"baseline_{name}": value for name, value in baseline["validation"].items()})
    gain = f"gain_over_baseline_{baseline['metric']}"
    metrics[gain] = baseline["gain"]
    if interval := baseline.get("gain_interval"):  # the gain's 95% interval over the test rows (paired bootstrap)
        metrics[f"{gain}_low"], metrics[f"{gain}_high"] = interval
    metrics.update({f"untuned_test_{name}": value for name, value in (baseline.get("untuned_test") or {}).items()})
    if paired := baseline.get("equal_samples"):  # both trials at equal training samples, on validation
        validation = next(iter(baseline["validation"]))
        metrics.update({f"equal_samples_{role}_{validation}": paired[role] for role in ("tuned", "baseline")})
    tracker.log_metrics(parent, metrics, 0)
    tracker.set_tags(parent, {BASELINE_TRIAL_TAG: baseline["trial_id"]})
    console.step(baseline["sentence"][0].upper() + baseline["sentence"][1:])


def _log_generations(tracker: Tracker, parent: str, path: Path) -> None:
    """generations.json on the parent run, and its answers as an MLflow table (one row per prompt, a column per
    variant), which the UI shows side by side."""
    tracker.log_file(parent, path, "export")
    examples = json.loads(path.read_text(encoding="utf-8"))["examples"]
    columns = {name: [row.get(name, "") for row in examples] for name in examples[0]}
    tracker.log_table(parent, columns, "export/generations_table.json")
