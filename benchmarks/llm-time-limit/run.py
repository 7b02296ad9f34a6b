"""A causal-LM sweep written with only data, model, methods and a learning-rate range, run with `--time-limit`: does
the command end within its limit, how much of it goes to the memory probe, and what does the exported model score?

Runs `finesweep run minimal.yaml --time-limit <limit>` (or `--sweep` another file, such as the LLM example
sweeps/smollm2-chat.yaml) once, as a user's first sweep on this machine (a machine
cache of its own: the GGUF is dequantized and every combination probed inside the limit). Records the plan's
division of the limit, the real phases, the trials, the test loss, perplexity and generation scores of every
exported variant, and the decode speed. Writes
benchmarks/llm-time-limit/llm-time-limit-chat-<cpu kind>-<date>-<commit>.json (cpu kind: avx512-bf16, avx512 or
avx2; a limit other than 10m adds itself after `chat`, another sweep file its name) and prints a Markdown table. Run
from the repository root, with nothing else loading the machine:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llm-time-limit/run.py [--limit 10m] [--sweep sweeps/smollm2-chat.yaml]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from finesweep.search.probe.device import cpu_identity

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def run(limit: str, work: Path, source: Path) -> dict[str, Any]:
    sweep = yaml.safe_load(source.read_text())
    sweep["output_root"] = str(work)
    if "://" not in sweep["data"]["path"]:  # a package's file (pkg://) is found wherever the sweep file lies
        sweep["data"]["path"] = str((source.parent / sweep["data"]["path"]).resolve())
    sweep_file = work / source.name
    sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "FINESWEEP_CACHE": str(work / "machine-cache")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "finesweep.search.cli", "run", str(sweep_file), "--time-limit", limit],
                          cwd=REPO, capture_output=True, text=True, env=environment)
    seconds = time.monotonic() - started
    (work / "console.txt").write_text(done.stdout + done.stderr)
    return collect(work / sweep["name"], done.stdout + done.stderr, done.returncode, seconds, limit)


def collect(folder: Path, console: str, exit_status: int, seconds: float, limit: str) -> dict[str, Any]:
    """What the run left: its summary, probe record, trials and export metrics; a refusal's error paragraph."""
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
    metrics_file = folder / "export" / "metrics.json"
    error = next((line for line in reversed(console.splitlines()) if line.startswith("error:")), None)
    return {"exit_status": exit_status, "wall_seconds": round(seconds, 1), "limit": limit, "error": error,
            "probe": _probe(folder), "phase_seconds": summary.get("phase_seconds"), "plan": _plan(summary.get("plan") or {}),
            "configurations": summary.get("configurations"),  # the trials started, and those that evaluated
            "trials": _trials(folder), "winner": (summary.get("best") or {}).get("params"),
            "exploitation": (summary.get("exploitation") or {}).get("sentence"),
            "variants": json.loads(metrics_file.read_text()) if metrics_file.is_file() else None,
            "deploy": (summary.get("deploy") or {}).get("variant"),
            "baseline": {key: (summary.get("baseline") or {}).get(key) for key in ("test", "winner_test", "untuned_test")}}


def _probe(folder: Path) -> dict[str, Any]:
    """Per combination the probe measured: its seconds, attempts, micro-batch and why it stopped short; and whose
    answer the trials took where the time limit left it unmeasured (measured_as: fp32's stood in)."""
    record, state = folder / "cache" / "probe.json", folder / "sweep-state.json"
    entries = json.loads(record.read_text()).values() if record.is_file() else []
    answers = json.loads(state.read_text()).get("probes", {}) if state.is_file() else {}
    probes = {}
    for entry in entries:
        key = f"{entry['model']}|{entry['precision']}|{entry['method']}"
        probes[key] = {"seconds": round(entry["seconds"], 1), "attempts": [a["batch"] for a in entry["attempts"]],
                       "max_micro_batch": entry["max_micro_batch"], "cut_short": entry.get("cut_short", False),
                       "too_slow": entry.get("too_slow"), "not_measured": entry.get("not_measured", False),
                       "measured_as": answers.get(key, {}).get("measured_as")}
    return probes


def _plan(plan: dict[str, Any]) -> dict[str, Any]:
    keep = ("predicted_wall_seconds", "budget_seconds", "search_seconds", "export_seconds", "exploration_seconds",
            "exploitation_seconds", "exploit_share", "max_steps", "num_trials", "notes")
    return {key: plan[key] for key in keep if key in plan}


def _trials(folder: Path) -> list[dict[str, Any]]:
    """Each trial's parameters, evaluations and how it ended, from Tune's result files."""
    found = []
    for result in sorted(folder.glob("tune/*/*/result.json")):
        rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if rows:
            config = rows[0].get("config", {})
            found.append({"trial": result.parent.name, "method": config.get("method"),
                          "precision": config.get("precision"),
                          "learning_rate": config.get("learning_rate"),
                          "effective_batch_size": config.get("effective_batch_size"),
                          "evaluations": [(row["step"], round(row.get("eval_loss", float("nan")), 4),
                                           row.get("eval_accuracy")) for row in rows]})
    return found


def table(result: dict[str, Any]) -> str:
    phases = result["phase_seconds"] or {}
    wall = result["wall_seconds"]
    predicted = (result["plan"] or {}).get("predicted_wall_seconds")
    against = f" (the plan predicted {predicted:.0f} s: the run took {wall / predicted:.2f}x)" if predicted else ""
    compared = result.get("configurations") or {}
    lines = [f"`run --time-limit {result['limit']}`: exit {result['exit_status']}, {wall:.0f} s{against}; " +
             ", ".join(f"{name} {value:.0f} s ({value / wall:.0%})" for name, value in phases.items()) +
             (f"; {compared['evaluated']} configurations evaluated of {compared['started']} started" if compared
              else ""),
             *([result["error"]] if result.get("error") else []), "",
             "| variant | test loss | perplexity | exact match | token F1 | ROUGE-L | ms / generated token |",
             "|---|---|---|---|---|---|---|"]
    for name, values in (result["variants"] or {}).items():
        cells = [values.get(key) for key in ("loss", "perplexity", "gen_exact_match", "gen_token_f1", "gen_rouge_l",
                                             "ms_per_generated_token")]
        lines.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.4g}" for v in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", default="10m", help="run --time-limit (default 10m)")
    parser.add_argument("--sweep", type=Path, default=HERE / "minimal.yaml", help="the sweep file (default minimal.yaml)")
    args = parser.parse_args()
    work = REPO / "runs" / "llm-time-limit"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result = {"cpu": cpu_identity(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                       text=True).stdout.strip(), "sweep": str(args.sweep.resolve().relative_to(REPO)),
              **run(args.limit, work, args.sweep.resolve())}
    named = "" if args.sweep.resolve() == (HERE / "minimal.yaml") else f"-{args.sweep.stem}"
    data = "chat" + named + ("" if args.limit == "10m" else f"-{args.limit}")
    out = naming.result_path(HERE, "llm-time-limit", data, {**result, "finesweep_commit": result["commit"]})
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['cpu']}; {result['cores']} cores; wrote {out.relative_to(REPO)}\n\n{table(result)}")


if __name__ == "__main__":
    main()
