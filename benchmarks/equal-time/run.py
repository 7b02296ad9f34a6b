"""Is the gain finesweep prints at equal time the gain a user would measure by hand?

`finesweep run` on the example file with `search.baseline.budget: equal` trains the baseline recipe (transformers'
Trainer defaults) again after the search for as many seconds as the export trained, and prints the export's test
gain over it with a 95% interval. Here the same A/B is run outside the product, on the same held-out split files:
transformers' Trainer as shipped (defaults_trainer.py: lr 5e-5, batch 8, fp32, linear decay, every core) given the
same seconds, its max_steps sized to them from a timing run, as a user who has that much time sizes a run. The
printed gain holds if it lies within the 95% interval (paired bootstrap over the test rows) of the export's gain over
that external run. Data: the tweets slices of benchmarks/versus-defaults/run.py (6,000 / 1,000 / 2,000 rows no
finesweep sweep file was tuned on). Run from the repository root, with nothing else loading the machine:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/equal-time/run.py --data tweets-b --seed 34

Writes benchmarks/equal-time/equal-time-<data>-<cpu kind>-<date>-<commit>.json and prints the comparison.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VERSUS = REPO / "benchmarks" / "versus-defaults"


def _versus_defaults():
    """benchmarks/versus-defaults/run.py, for its split files, sweep copies, timed commands and machine facts."""
    spec = importlib.util.spec_from_file_location("versus_defaults", VERSUS / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export_rows(export: Path, data: Path) -> np.ndarray:
    """Each test row's correctness for the exported full-precision model, loaded as `finesweep predict` loads it."""
    from finesweep.trainer.serving.predict import predict

    sys.path.insert(0, str(VERSUS))
    from defaults_trainer import read_split

    texts, labels = read_split(data / "test.csv")
    predicted = predict(export / "model", texts)
    return np.array([row["label"] == label for row, label in zip(predicted, labels)], dtype=float)


def cpu_kind(cpu: str) -> str:
    """avx512-bf16, avx512 or avx2: the instruction sets that decide a CPU's training speed here."""
    return "avx512-bf16" if "avx512_bf16" in cpu else "avx512" if "avx512f" in cpu else "avx2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["tweets", "tweets-b"], default="tweets-b")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    versus = _versus_defaults()
    work = REPO / "runs" / "equal-time" / f"{args.data}-{args.seed}"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    data = work / "data"
    versus.write_splits(versus.tweet_splits(False, versus.TWEET_SLICES[args.data]), data)
    versus.check_nothing_dropped(data, work / "check-cache")

    name = f"{args.data}-equal-time"
    sweep = versus.write_sweep(versus.SWEEP_FILES["example"], name, data, work, None, False,
                               {"baseline": {"budget": "equal"}}, args.seed)
    wall, _ = versus.finesweep("run", sweep, work / "logs" / f"{name}.log")
    summary = json.loads((work / name / "summary.json").read_text())
    baseline, comparison = summary["baseline"], summary["comparison"]
    seconds = comparison["equal_time"]["seconds"]

    rows_file = work / "trainer-rows.txt"
    command = [sys.executable, str(VERSUS / "defaults_trainer.py"), str(data), str(versus.MODEL),
               str(work / "trainer"), "--seconds", str(seconds), "--max-seq-len", str(versus.MAX_SEQ_LEN),
               "--seed", str(args.seed), "--rows-out", str(rows_file)]
    trainer_wall, stdout = versus.timed(command, work / "logs" / "trainer.log")
    trainer = json.loads(stdout.strip().splitlines()[-1])

    from finesweep.search.selection.baseline import gain_interval
    from finesweep.spaces import Task
    from finesweep.trainer.serving.evaluate import RowScores

    exported = export_rows(work / name / "export", data)
    external = np.array([float(line) for line in rows_file.read_text().split()])
    ones = np.ones_like(exported)
    external_gain = round(100 * (exported.mean() - external.mean()), 2)
    low, high = gain_interval(Task.classification, RowScores(exported, ones), RowScores(external, ones), args.seed)
    results = {
        **versus.machine(), "date": time.strftime("%Y-%m-%d"), "finesweep_commit": versus.git("rev-parse", "--short", "HEAD"),
        "data": args.data, "seed": args.seed, "sweep_wall_seconds": wall,
        "export_test_accuracy": summary["test_metrics"]["full"]["accuracy"],
        "export_test_accuracy_as_predict_loads_it": round(float(exported.mean()), 4),
        "printed": {"gain": baseline["gain"], "interval": baseline["gain_interval"], "sentence": baseline["sentence"],
                    "equal_time_baseline_test_accuracy": baseline["test"]["accuracy"], "footing": baseline["footing"],
                    "equal_time": comparison["equal_time"], "arms": comparison["arms"]},
        "external": {**trainer, "seconds_given": seconds, "process_wall_seconds": trainer_wall,
                     "gain": external_gain, "interval": [low, high]},
        "printed_gain_within_external_interval": low <= baseline["gain"] <= high,
    }
    out = HERE / f"equal-time-{args.data}-{cpu_kind(results['cpu'])}-{results['date']}-{results['finesweep_commit']}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{results['cpu']}; wrote {out.relative_to(REPO)}")
    print(f"printed gain {baseline['gain']:+.2f} points (interval {baseline['gain_interval']}); external Trainer given "
          f"{seconds:.0f} s: test accuracy {trainer['test_accuracy']:.4f}, the export's gain over it {external_gain:+.2f} "
          f"(95% interval {low:+.2f} to {high:+.2f}): printed gain within it: {results['printed_gain_within_external_interval']}")


if __name__ == "__main__":
    main()
