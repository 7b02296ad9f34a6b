"""How many passes a small data set of text pairs wants: answers.yaml with `search.exploit.max_epochs: 2` against
auto (the passes that make 12,000 training samples, 2 to 10), the same split and the same `--time-limit`, one
after the other. Writes the pairs first (make_data.py) when answers.csv is missing.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/text-pairs/run.py --time-limit 5m

Writes benchmarks/text-pairs/runs/<arm>/ (each sweep's output) and
benchmarks/text-pairs/text-pairs-answers-<cpu kind>-<date>-<commit>.json.
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
ARMS = {"2-passes": 2, "auto": "auto"}


def run_arm(arm: str, max_epochs: int | str, time_limit: str) -> dict:
    """answers.yaml as a user wrote it, with only the arm's cap added; its summary's figures."""
    config = yaml.safe_load((HERE / "answers.yaml").read_text())
    folder = HERE / "runs" / arm
    folder.mkdir(parents=True, exist_ok=True)
    config.update(name=f"answers-{arm}", output_root=str(folder), search={"exploit": {"max_epochs": max_epochs}})
    config["data"]["path"] = str(HERE / "answers.csv")
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    started = time.time()
    subprocess.run([str(Path(sys.executable).with_name("finesweep")), "run", str(path), "--time-limit", time_limit],
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    summary = json.loads((folder / config["name"] / "summary.json").read_text())
    exploitation, best = summary.get("exploitation") or {}, summary["best"]
    return {"arm": arm, "max_epochs": max_epochs, "wall_s": round(time.time() - started, 1),
            "test_accuracy": summary["test_metrics"]["full"]["accuracy"],
            "baseline_test_accuracy": (summary.get("baseline") or {}).get("test", {}).get("accuracy"),
            "best": best, "final_step": exploitation.get("final_step"),
            "max_epochs_step": exploitation.get("max_epochs_step")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", default="5m")
    args = parser.parse_args()
    if not (HERE / "answers.csv").exists():
        subprocess.run([sys.executable, str(HERE / "make_data.py")], check=True)
    recorded = naming.facts()
    arms = [run_arm(arm, cap, args.time_limit) for arm, cap in ARMS.items()]
    out = naming.result_path(HERE, "text-pairs", "answers", recorded)
    out.write_text(json.dumps({"benchmark": "text-pairs", "time_limit": args.time_limit, **recorded,
                               "arms": arms}, indent=1) + "\n")
    for arm in arms:
        print(f"{arm['arm']}: test {arm['test_accuracy']:.4f} (baseline recipe {arm['baseline_test_accuracy']})")
    print(f"result: {out}")


if __name__ == "__main__":
    main()
