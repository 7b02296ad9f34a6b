"""GPU use over a run, from `nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader`
samples: per 10-second window, the mean and peak utilization and the peak memory."""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from datetime import datetime

WINDOW_SECONDS = 10


def windows(path: str) -> dict[int, list[tuple[int, int]]]:
    """(utilization %, memory MiB) samples by the window they fall in, counted from the first sample."""
    samples = []
    for stamp, utilization, memory in csv.reader(open(path)):
        when = datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f")
        samples.append((when, int(utilization.split()[0]), int(memory.split()[0])))
    by_window: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for when, utilization, memory in samples:
        by_window[int((when - samples[0][0]).total_seconds() // WINDOW_SECONDS)].append((utilization, memory))
    return by_window


def main(path: str) -> None:
    for window, samples in sorted(windows(path).items()):
        use = [u for u, _ in samples]
        print(f"{window * WINDOW_SECONDS:4d} s  utilization mean {sum(use) / len(use):5.1f} %  peak {max(use):3d} %  "
              f"memory peak {max(m for _, m in samples):6d} MiB")


if __name__ == "__main__":
    main(sys.argv[1])
