"""The quickstart as a user runs it, with and without the plan, side by side on one machine.

Each variant is `finesweep run` on a copy of the example sweep file (`sweeps/tweets.yaml` by default) that differs
only in `search.fit_to_budget` (the plan shortens the trials and caps their number to what the budget pays for;
without it the file's max_steps and num_trials stand and the budget cuts what runs when it ends), in a fresh output
folder each, one after the other. For each: the command's wall time and phases, the plan's predicted wall time
(and the ratio real / predicted), the trials and how they ended, the winner's model and step, and the test
accuracy in full precision and int8. Each variant prepares its data and runs its probe itself, as a user's first
run does (no cache is shared). Writes benchmarks/quickstart/quickstart-tweets-<cpu kind>-<date>-<commit>.json and
prints a Markdown table. Run from the repository root, with nothing else loading the machine:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quickstart/run.py [--sweep sweeps/tweets.yaml] [--variants plan no-plan]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VARIANTS = {"plan": True, "no-plan": False}


def cpu_flags() -> str:
    """The CPU's model and its AVX-512 flags: what decides bf16's speed on a CPU."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = sorted(set(re.findall(r"\bavx512[a-z_0-9]*", info)))
    return f"{model or platform.processor()}; {os.cpu_count()} cores; " + (" ".join(flags) or "no AVX-512")


def run_variant(sweep_file: Path, name: str, fit_to_budget: bool, work: Path) -> dict[str, Any]:
    sweep = yaml.safe_load(sweep_file.read_text())
    sweep["name"] = f"{sweep['name']}-{name}"
    sweep["output_root"] = str(work)
    sweep.setdefault("search", {})["fit_to_budget"] = fit_to_budget
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "finesweep.search.cli", "run", str(path)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.monotonic() - started
    (work / f"{name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{name}: finesweep run failed (exit {done.returncode}); see {work / (name + '.log')}")
    folder = work / sweep["name"]
    summary = json.loads((folder / "summary.json").read_text())
    plan = summary.get("plan") or {}
    metrics = summary["test_metrics"]
    return {"variant": name, "fit_to_budget": fit_to_budget, "command_seconds": round(seconds, 1),
            "wall_seconds": summary["wall_seconds"], "phase_seconds": summary["phase_seconds"],
            "predicted_wall_seconds": plan.get("predicted_wall_seconds"),
            "real_over_predicted": round(summary["wall_seconds"] / plan["predicted_wall_seconds"], 3) if plan else None,
            "max_steps": plan.get("max_steps"), "num_trials": plan.get("num_trials"),
            "trials": trial_ends(folder), "winner": {k: summary["best"][k] for k in ("model", "step", "trial_id")},
            "test_accuracy": {variant: round(m["accuracy"], 4) for variant, m in metrics.items() if "accuracy" in m}}


def trial_ends(folder: Path) -> list[dict[str, Any]]:
    """Each trial as the sweep's MLflow store has it: model, how it ended, its measured training samples/s (to set
    against the probe's), in start order."""
    from mlflow import MlflowClient

    state = json.loads((folder / "sweep-state.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    runs = client.search_runs([state["experiment_id"]], order_by=["attributes.start_time ASC"],
                              filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    return [{"model": run.data.params.get("model"), "batch": run.data.params.get("effective_batch_size"),
             "end": run.data.tags.get("finesweep.end_state", "?"),
             "samples_per_second": round(run.data.metrics.get("train_samples_per_second_so_far", 0.0), 2)}
            for run in runs]


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| variant | wall s (data / probe / search / export) | predicted s | real / predicted | steps per trial "
            "| trials (ends) | winner (model, step) | test acc full / int8 |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        phases = " / ".join(f"{r['phase_seconds'].get(p, 0):g}" for p in ("data", "probe", "search", "export"))
        ends = ", ".join(f"{t['model']} {t['end']}" for t in r["trials"])
        acc = " / ".join(f"{r['test_accuracy'].get(v, float('nan')):.3f}" for v in ("full", "int8"))
        rows.append(f"| {r['variant']} | {r['wall_seconds']:g} ({phases}) | {r['predicted_wall_seconds']} | "
                    f"{r['real_over_predicted']} | {r['max_steps']} | {len(r['trials'])} ({ends}) | "
                    f"{r['winner']['model']}, {r['winner']['step']} | {acc} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "tweets.yaml")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--work", type=Path, default=HERE / "runs")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    results = []
    for name in args.variants:
        results.append(run_variant(args.sweep.resolve(), name, VARIANTS[name], args.work))
        print(f"{name}: {json.dumps(results[-1])}", flush=True)
    recorded = naming.facts()
    out = {"machine": cpu_flags(), "sweep": str(args.sweep), **recorded, "results": results}
    naming.result_path(HERE, "quickstart", args.sweep.stem, recorded).write_text(json.dumps(out, indent=1))
    print(f"\n{out['machine']}\n\n{table(results)}")


if __name__ == "__main__":
    main()
