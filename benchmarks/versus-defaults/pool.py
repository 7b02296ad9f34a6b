"""The three bars judged on every sample at once: the mean of each bar's paired difference and its standard error.

One run of run.py is one draw per arm, and a run's spread is about a point (the 2-epoch defaults alone, same data,
seed and machine kind, scored 0.7725 to 0.7885 in the runs here): a bar met or missed by a single draw says little.
This script pairs each sweep arm with the defaults arm of the same run (same split files, same machine, minutes
apart) and prints, per bar, the differences, their mean, the standard error of that mean and the runs counted.
Reads the versus-defaults-*.json files named (by default every one whose finesweep commit is at or after --since). An arm a
file lists under "superseded" (a bug's draw, fixed and drawn again in another file) is left out.

    python3 benchmarks/versus-defaults/pool.py                        # the files of the current product (--since)
    python3 benchmarks/versus-defaults/pool.py versus-defaults-tweets-b-*.json  # one slice
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (bar, sweep arm, defaults arm, the margin the bar asks for, in points)
BARS = (("example >= 2-epoch defaults at their wall time", "sweep-example", "defaults-2epochs", 0.0),
        ("plain file >= 1-epoch defaults at the 2-epoch wall time", "sweep-plain", "defaults-1epoch", 0.0),
        ("example with its own budget >= 2-epoch defaults + 1 point", "example-own-budget", "defaults-2epochs", 1.0))
# The product the bars are judged on: the continuation of the winner and the baseline row in every sweep.
DEFAULT_SINCE = "408245d"
# The bars are judged on data the project does not ship: the chat categories come from the LLM example's own file.
SHIPPED_DATA = {"chat"}


def is_at_or_after(commit: str, since: str) -> bool:
    done = subprocess.run(["git", "merge-base", "--is-ancestor", since, commit], cwd=HERE, capture_output=True)
    return done.returncode == 0


def differences(results: list[dict], arm: str, reference: str) -> list[tuple[str, float]]:
    """(run, points of `arm` over `reference`) for every run that has both."""
    found = []
    for run in results:
        arms = run["arms"]
        if arm in run.get("superseded", {}):
            continue
        ours, theirs = (arms.get(arm) or {}).get("test_accuracy"), (arms.get(reference) or {}).get("test_accuracy")
        if ours is not None and theirs is not None:
            found.append((run["file"], round(100 * (ours - theirs), 2)))
    return found


def verdict(points: list[float], margin: float) -> str:
    """Mean and its standard error, and whether the bar holds on the mean (and beyond two standard errors)."""
    mean = statistics.mean(points)
    error = statistics.stdev(points) / len(points) ** 0.5 if len(points) > 1 else float("nan")
    clear = "clearly met" if mean - 2 * error >= margin else "clearly missed" if mean + 2 * error < margin else ""
    held = "met on the mean" if mean >= margin else "missed on the mean"
    return f"mean {mean:+.2f} points, standard error {error:.2f}, n={len(points)}: {held}" + (f"; {clear}" if clear else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="results files (default: every versus-defaults-*.json here)")
    parser.add_argument("--since", default=DEFAULT_SINCE, help="only runs of this finesweep commit or later")
    args = parser.parse_args()
    results = []
    for path in args.files or sorted(HERE.glob("versus-defaults-*.json")):
        run = json.loads(path.read_text())
        shipped = (run.get("data") or {}).get("name") in SHIPPED_DATA
        if "arms" in run and not shipped and is_at_or_after(run.get("finesweep_commit", ""), args.since):
            results.append({**run, "file": path.name})
    print(f"{len(results)} runs of finesweep {args.since} or later")
    for bar, arm, reference, margin in BARS:
        found = differences(results, arm, reference)
        print(f"\n{bar}:")
        for name, points in found:
            print(f"  {points:+6.2f}  {name}")
        print(f"  {verdict([p for _, p in found], margin) if found else 'no run has both arms'}")


if __name__ == "__main__":
    main()
