"""Data preparation at scale: finesweep's prepare() against plain pandas.read_csv + sklearn train_test_split.

Generates a tweet-like CSV (default 1,000,000 rows, 3 labels, ~3% exact duplicates, ~1% near duplicates,
~0.5% conflicting labels), then runs each method in its own child process and reports wall time, rows/s
and the child's peak resident memory (ru_maxrss from wait4), and finesweep / pandas ratios.

    . .venv/bin/activate && pip install scikit-learn   # the reference only; not a finesweep dependency
    python benchmarks/data/run.py --rows 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

WORDS = ("flight delayed again love this great service awful customer support thanks so much never flying "
         "with you worst day ever happy new year the crew was amazing lost my bag seat was fine gate changed "
         "lol wifi did not work best airline food cold staff friendly late check in smooth landing rude").split()
LABELS = ("negative", "neutral", "positive")


def generate(path: Path, rows: int, seed: int = 0) -> None:
    """Unique texts plus exact repeats, case/space variants (near duplicates) and relabelled repeats (conflicts)."""
    rng = random.Random(seed)
    written: list[tuple[str, str]] = []
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("text,label\n")
        for i in range(rows):
            roll = rng.random()
            if written and roll < 0.03:
                text, label = rng.choice(written)
            elif written and roll < 0.04:
                text, label = rng.choice(written)
                text = "  " + text.upper()
            elif written and roll < 0.045:
                text, label = rng.choice(written)
                label = rng.choice([lab for lab in LABELS if lab != label])
            else:
                words = rng.choices(WORDS, k=rng.randint(5, 25))
                text, label = f"@user{i % 5000} " + " ".join(words) + f" #{i}", rng.choice(LABELS)
                if len(written) < 20000:
                    written.append((text, label))
            handle.write('"' + text.replace('"', '""') + '",' + label + "\n")


def run_finesweep(csv_path: Path, work: Path) -> int:
    from finesweep.spaces import DataConfig
    from finesweep.trainer.data import prepare

    report = prepare(DataConfig(path=str(csv_path)), 0, work).report
    return sum(report.splits.values())


def run_pandas(csv_path: Path, work: Path) -> int:
    import pandas as pd
    from sklearn.model_selection import train_test_split

    frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    frame["text"] = frame["text"].str.strip()
    frame = frame[(frame["text"] != "") & (frame["label"] != "")].drop_duplicates("text")
    train, rest = train_test_split(frame, test_size=0.2, random_state=0, stratify=frame["label"])
    validation, test = train_test_split(rest, test_size=0.5, random_state=0, stratify=rest["label"])
    for name, part in (("train", train), ("validation", validation), ("test", test)):
        part.to_parquet(work / f"{name}.parquet")
    return len(train) + len(validation) + len(test)


def child(method: str, csv_path: Path, work: Path) -> None:
    started = time.perf_counter()
    kept = (run_finesweep if method == "finesweep" else run_pandas)(csv_path, work)
    print(json.dumps({"seconds": time.perf_counter() - started, "rows_kept": kept}))


def measure(method: str, csv_path: Path, work: Path) -> dict:
    """Run one method in a fresh process: its own peak memory, not the parent's or the other method's."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", method, "--csv", str(csv_path), "--work", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{method} failed (status {status})")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result.update(wall_seconds=time.perf_counter() - started, peak_mib=usage.ru_maxrss / 1024)  # Linux: KiB
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", choices=["finesweep", "pandas"])
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.csv, args.work)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "tweets.csv"
        generate(csv_path, args.rows)
        print(f"{args.rows:,} rows, {csv_path.stat().st_size / 2**20:.0f} MiB CSV")
        results = {}
        for method in ("finesweep", "pandas"):
            (Path(tmp) / method).mkdir()
            results[method] = measure(method, csv_path, Path(tmp) / method)
    print("| method | rows kept | time in process (s) | wall incl. start-up (s) | rows/s | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for method, r in results.items():
        print(f"| {method} | {r['rows_kept']:,} | {r['seconds']:.1f} | {r['wall_seconds']:.1f} | "
              f"{args.rows / r['wall_seconds']:,.0f} | {r['peak_mib']:.0f} |")
    f, p = results["finesweep"], results["pandas"]
    print(f"finesweep / pandas: time {f['wall_seconds'] / p['wall_seconds']:.2f}x, peak memory {f['peak_mib'] / p['peak_mib']:.2f}x")
    recorded = naming.facts()
    out = naming.result_path(Path(__file__).parent, "data", f"tweets-{args.rows}", recorded)
    out.write_text(json.dumps({"benchmark": "data", "command": f"python benchmarks/data/run.py --rows {args.rows}",
                               **recorded, "rows": args.rows, "results": results}, indent=1) + "\n")
    print(f"result: {out}")


if __name__ == "__main__":
    main()
