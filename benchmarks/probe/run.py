"""finesweep's memory probe against accelerate's and Lightning's batch-size finders: same model, gauge and budget.

Every method asks the same question through the same probe process machinery (real forward+backward+AdamW
steps at the longest sequence, peak resident memory of the probe process): does this micro-batch fit
peak x (1 + SAFETY_MARGIN) <= budget? Ground truth is an exhaustive scan of every batch size. Run:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/probe/run.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from finesweep.search.probe import table as probe
from finesweep.search.probe.device import resolve_device
from finesweep.search.probe.batch_search import SAFETY_MARGIN
from finesweep.search.probe.worker import ProbeWorker
from finesweep.trainer.probe_step import ProbeRequest

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

CAP = 256  # the largest effective batch of the imagined sweep: finesweep never tries above it


@dataclass
class Outcome:
    """What one method found and what it cost."""

    method: str
    found: int  # the largest micro-batch it reports as fitting
    pick: int  # the micro-batch a user of the method trains with
    attempts: int
    steps: int
    seconds: float
    search_steps: int = 0  # steps spent finding the largest batch (finesweep also times candidates and sizes eval)


class Gauge:
    """One method's view of the probe process: fits(batch) against the budget, counting attempts and steps."""

    def __init__(self, worker, base: ProbeRequest, budget: int, replace_on_failure: bool):
        self.worker, self.base, self.budget = worker, base, budget
        self.replace_on_failure = replace_on_failure
        self.attempts = self.steps = 0

    def fits(self, batch: int) -> bool:
        attempt = self.worker.attempt(ProbeRequest(**{**asdict(self.base), "batch": batch}))
        self.attempts += 1
        self.steps += attempt.steps
        ok = not attempt.out_of_memory and attempt.peak_bytes * (1 + SAFETY_MARGIN) <= self.budget
        if not ok and self.replace_on_failure:
            self.worker.replace()
        return ok


class CountingWorker:
    """A ProbeWorker that counts attempts and steps, for finesweep's own search (which drives the worker itself)."""

    def __init__(self, worker: ProbeWorker):
        self.worker, self.attempts, self.steps = worker, 0, 0

    def attempt(self, request: ProbeRequest, timeout: float | None = None):
        result = self.worker.attempt(request, timeout)
        self.attempts += 1
        self.steps += result.steps
        return result

    def replace(self) -> None:
        self.worker.replace()


def build_model(folder: Path, hidden: int, layers: int) -> Path:
    """A BERT encoder built from a config (random weights: memory and speed do not depend on the values)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=8000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=4 * hidden, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder)
    return folder


def fresh_worker(base: ProbeRequest, threads: int) -> ProbeWorker:
    """A started probe process with the model loaded, so every method starts from the same warm state."""
    worker = ProbeWorker(resolve_device(), threads)
    worker.attempt(ProbeRequest(**{**asdict(base), "batch": 1, "mode": "eval"}))
    return worker


def choose_budget(base: ProbeRequest, threads: int, target: int) -> int:
    """A budget whose limit lies midway between the peaks at `target` and `target + 1`.

    Peaks repeat to within about 0.5 MiB; half a sample (about 2 MiB here) on either side keeps the true
    limit unambiguous, so found / true measures the search and not the gauge's noise.
    """
    worker = fresh_worker(base, threads)
    try:
        fit, fail = (worker.attempt(ProbeRequest(**{**asdict(base), "batch": b})) for b in (target, target + 1))
    finally:
        worker.close()
    return int((fit.peak_bytes + fail.peak_bytes) / 2 * (1 + SAFETY_MARGIN))


def exhaustive_scan(base: ProbeRequest, budget: int, threads: int, timed_steps: int) -> dict[int, dict]:
    """Every batch from 1 until four in a row fail, each in a fresh probe process (one process's peaks drift up
    by about 3 MiB over 45 attempts, half a sample here); then samples/s of each with `timed_steps` (median)."""
    worker = fresh_worker(base, threads)
    scan: dict[int, dict] = {}
    batch, failures = 1, 0
    try:
        while failures < 4:
            worker.replace()
            a = worker.attempt(ProbeRequest(**{**asdict(base), "batch": batch}))
            scan[batch] = {"fits": a.peak_bytes * (1 + SAFETY_MARGIN) <= budget, "peak": a.peak_bytes}
            failures = 0 if scan[batch]["fits"] else failures + 1
            batch += 1
        for batch, row in scan.items():
            timed = worker.attempt(ProbeRequest(**{**asdict(base), "batch": batch, "timed_steps": timed_steps}))
            row["samples_per_second"] = timed.samples_per_second
    finally:
        worker.close()
    return scan


def run_finesweep(base: ProbeRequest, budget: int, threads: int) -> tuple[Outcome, probe.ProbeResult]:
    worker = fresh_worker(base, threads)
    counting = CountingWorker(worker)
    start = time.perf_counter()
    try:
        result = probe._probe_one(counting, base, "bench", CAP, budget, resolve_device()).choose("fastest")
    finally:
        worker.close()
    seconds = time.perf_counter() - start
    search_steps = sum(a["steps"] for a in result.attempts[:result.search_attempts])
    outcome = Outcome("finesweep", result.max_micro_batch, result.micro_batch, counting.attempts, counting.steps, seconds,
                      search_steps=search_steps)
    return outcome, result



def run_accelerate(gauge: Gauge) -> int:
    """accelerate's own find_executable_batch_size (start 128, x0.9 per failure), fed a fake CUDA OOM error."""
    from accelerate.utils import find_executable_batch_size

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size: int) -> int:
        if not gauge.fits(batch_size):
            raise RuntimeError("CUDA out of memory. (the probe's peak exceeds the budget)")
        return batch_size

    return train()


def run_power(gauge: Gauge, init_val: int = 2, max_trials: int = 25) -> int:
    """Lightning's _run_power_scaling: double on success; on the first failure after a success, halve and stop."""
    size, any_success = init_val, False
    for _ in range(max_trials):
        if gauge.fits(size):
            size, any_success = size * 2, True
        else:
            size = int(size * 0.5)
            if any_success:
                break
    return size


def run_binsearch(gauge: Gauge, init_val: int = 2, max_trials: int = 25, margin: float = 0.05) -> int:
    """Lightning's _run_binary_scaling (double, then bisect), then its `margin`: 5% off the result."""
    size, low, high, count = init_val, 1, None, 0
    while True:
        if gauge.fits(size):
            count += 1
            if count > max_trials:
                break
            low = size
            if high:
                if high - low <= 1:
                    break
                size = (high + low) // 2
            else:
                size *= 2
        else:
            high = size
            size = (high + low) // 2
            if high - low <= 1:
                break
    return max(1, int(size * (1 - margin)))


def run_baseline(name: str, search, base: ProbeRequest, budget: int, threads: int) -> Outcome:
    """Baselines run in the training process itself: one process, never replaced after a failure."""
    worker = fresh_worker(base, threads)
    gauge = Gauge(worker, base, budget, replace_on_failure=False)
    start = time.perf_counter()
    try:
        found = search(gauge)
    finally:
        worker.close()
    return Outcome(name, found, found, gauge.attempts, gauge.steps, time.perf_counter() - start)


def table(outcomes: list[Outcome], scan: dict[int, dict]) -> str:
    truth = max(b for b, s in scan.items() if s["fits"])
    speed = {b: s["samples_per_second"] for b, s in scan.items()}  # a pick over the limit is measured too
    best = max(v for b, v in speed.items() if scan[b]["fits"])
    binsearch = next(o.steps for o in outcomes if o.method.startswith("Lightning binsearch"))
    rows = ["| method | found / true | pick | pick's samples/s / best | attempts | probe steps (finding the max) | "
            "steps / binsearch's | wall s |", "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        search = o.search_steps or o.steps
        rows.append(f"| {o.method} | {o.found} / {truth} = {o.found / truth:.2f} | {o.pick} | {speed.get(o.pick, 0.0) / best:.2f} | "
                    f"{o.attempts} | {o.steps} ({search}) | {o.steps / binsearch:.2f} ({search / binsearch:.2f}) | {o.seconds:.1f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--target", type=int, default=45, help="the batch the budget makes the largest that fits")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scan-timed-steps", type=int, default=5)
    parser.add_argument("--out", type=Path, help="default: probe-bert-<hidden>x<layers>-<cpu kind>-<date>-<commit>.json here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = ProbeRequest(candidate={"name": "bert-small", "path": str(build_model(Path(folder), args.hidden, args.layers))},
                            task="classification", num_labels=3, precision="fp32", method="full",
                            seq_len=args.seq_len, batch=1)
        started = time.perf_counter()
        budget = choose_budget(base, args.threads, args.target)
        scan = exhaustive_scan(base, budget, args.threads, args.scan_timed_steps)
        finesweep, probe_result = run_finesweep(base, budget, args.threads)
        outcomes = [finesweep]
        for name, search in [("accelerate find_executable_batch_size (128, x0.9)", run_accelerate),
                             ("Lightning power", run_power), ("Lightning binsearch (5% margin)", run_binsearch)]:
            outcomes.append(run_baseline(name, search, base, budget, args.threads))
    report = table(outcomes, scan)
    print(f"budget {budget / 2**20:.1f} MiB, margin {SAFETY_MARGIN:.0%}, true limit "
          f"{max(b for b, s in scan.items() if s['fits'])}, total {time.perf_counter() - started:.0f} s\n{report}")
    recorded = naming.facts()
    data = f"bert-{args.hidden}x{args.layers}"
    out = args.out or naming.result_path(Path(__file__).parent, "probe", data, recorded)
    out.write_text(json.dumps({**recorded, "budget": budget, "scan": scan, "outcomes": [asdict(o) for o in outcomes], "finesweep": asdict(probe_result),
                                    "table": report, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))


if __name__ == "__main__":
    main()
