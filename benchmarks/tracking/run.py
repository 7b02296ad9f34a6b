"""Tracking overhead: the same trial with and without MLflow tracking, against the embedded store and a real server.

One trial recipe (the example's data from `sweeps/tweets.yaml`, its MiniLM cut to 3 layers as `minilm-l3`, a fixed
recipe, one seed) is built by finesweep's own `build_plan` and trained by `finesweep.trainer.trial.train` several
times, in one process, in a balanced order (`schedule`: none sqlite server, server none sqlite, sqlite server none for 3
repeats; every arm has the same mean position, so a steady drift of the shared machine shifts all arms alike):

- none:   a sink that only keeps the numbers; no Tracker at all.
- sqlite: the trial's real tracking path (search/tuning/trainable.py `run_trial` without Ray): a Tracker built as a trial
          builds it (tracking URI + the sweep's spool folder), the lookup of the trial's run, `start_run` nested
          under a parent run, `log_params`, the real `TuneMlflowSink` (every log line and every evaluation to MLflow;
          its `tune.report` is a no-op outside a Tune session), and the end tags + `finish`. Store: the embedded
          default, a SQLite file in the sweep folder.
- server: the same against `mlflow server` started by `mlflow/start-server.sh` on 127.0.0.1 (free port, temp dir).

Every Tracker call is timed where it is made (wall time inside the call), so the tracking time per trial, per
evaluation and per log line is measured directly; the whole-trial difference (with - without), in wall time and in
this process's CPU time, is the sanity check.
Writes `benchmarks/tracking/tracking-tweets-<cpu kind>-<date>-<commit>.json` and prints a Markdown table. Run from
the repository root:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tracking/run.py [--repeats 3] [--max-steps 100]
"""

from __future__ import annotations

import os

# One training thread, set before torch is imported (train() also sets it from resources.cpus_per_trial).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

# Run as a script: its folder is on sys.path, so the sibling module imports by name.
from stores import cold_start, group_cpu_s, open_store, start_server, stop_server  # noqa: E402

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
SWEEP_FILE = REPO / "sweeps" / "tweets.yaml"
MODEL = "minilm-l3"
ARMS = ("none", "sqlite", "server")
GOAL = 0.02  # the goal: tracking under 2% of trial time


@dataclass
class Call:
    """One Tracker call: where in the trial it was made, which method, how long it took."""

    phase: str  # "trial" (once per trial), "log" (a training log line), "evaluation"
    method: str
    seconds: float


@dataclass
class Run:
    """One trial of the benchmark."""

    arm: str
    order: int
    wall_s: float
    evaluations: int
    log_lines: int
    last_eval_loss: float
    cpu_s: float  # this process's CPU time during the trial: less sensitive than wall time to others' load
    calls: list[Call] = field(default_factory=list)
    server_cpu_s: float | None = None  # the MLflow server's CPU time during the trial (all its processes)

    @property
    def tracking_s(self) -> float:
        return sum(c.seconds for c in self.calls)

    def phase_s(self, phase: str) -> float:
        return sum(c.seconds for c in self.calls if c.phase == phase)


# --- the sinks and the timed tracker ---------------------------------------------------------------------------


class TimedTracker:
    """The real Tracker; every public call made through it is timed and recorded with the current phase."""

    def __init__(self, tracker: Any, calls: list[Call]):
        self._tracker, self._calls = tracker, calls
        self.phase = "trial"

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._tracker, name)
        if name.startswith("_") or not callable(target):
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self._calls.append(Call(self.phase, name, time.perf_counter() - started))

        return timed


class KeepingSink:
    """Without tracking: keeps the numbers, sends them nowhere."""

    def __init__(self):
        self.logs: list[tuple[int, dict[str, float]]] = []
        self.evaluations: list[tuple[int, dict[str, float]]] = []

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        self.logs.append((step, metrics))

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        self.evaluations.append((step, metrics))


class PhaseSink(KeepingSink):
    """With tracking: the real TuneMlflowSink, told which phase its Tracker calls belong to (and the numbers kept)."""

    def __init__(self, inner: Any, tracker: TimedTracker):
        super().__init__()
        self.inner, self.tracker = inner, tracker

    def on_log(self, step: int, metrics: dict[str, float]) -> None:
        super().on_log(step, metrics)
        self.tracker.phase = "log"
        self.inner.on_log(step, metrics)

    def on_evaluation(self, step: int, metrics: dict[str, float], checkpoint_dir: Path) -> None:
        super().on_evaluation(step, metrics, checkpoint_dir)
        self.tracker.phase = "evaluation"
        self.inner.on_evaluation(step, metrics, checkpoint_dir)


# --- the trial -------------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What every run shares: the validated sweep, the trial's recipe, its tokenized data, the work folder."""

    config: Any  # SweepConfig
    params: dict[str, Any]
    context: Any  # TrialContext (tracking fields filled per store)
    work: Path


def sweep_config(args: argparse.Namespace) -> Any:
    """tweets.yaml with the benchmark's trial length, validation size and one thread per trial."""
    from finesweep.spaces import SweepConfig
    from finesweep.spaces.loader import load

    raw = load(SWEEP_FILE).model_dump(mode="json")
    # The example's pretrained MiniLM, first 3 of its 6 layers, [CLS] head: the recipe the figures were measured on.
    raw["models"] = [{"name": MODEL, "path": raw["models"][0]["path"], "config_overrides": {"num_hidden_layers": 3}}]
    raw["data"]["splits"] = {"train": args.train_rows, "validation": args.validation_rows, "test": args.validation_rows}
    raw["search"].update(max_steps=args.max_steps, eval_every_steps=args.eval_every)
    raw["resources"]["cpus_per_trial"] = args.threads
    return SweepConfig.model_validate(raw)


def setup(args: argparse.Namespace, work: Path) -> Setup:
    """The data prepared and tokenized as a sweep does it, and the trial's recipe (finesweep's build_plan inputs)."""
    from finesweep.search.probe.table import combination_key
    from finesweep.search.tuning.trainable import TrialContext
    from finesweep.trainer import data, models
    from finesweep.trainer.models import model_vocab_size

    config = sweep_config(args)
    candidate = config.candidate(MODEL)
    prepared = data.prepare(config.data, config.seed, work / "cache")
    tokenizer = models.load_tokenizer(candidate, config.trust_remote_code)
    tokenized = data.tokenize(prepared, tokenizer, config.data.task, config.data.max_seq_len, work / "cache",
                              too_long=config.data.too_long, model_name=MODEL,
                              vocab_size=model_vocab_size(candidate, config.trust_remote_code))
    params = {"model": MODEL, "precision": args.precision, "method": "full", "learning_rate": 2.0e-4,
              "weight_decay": 0.01, "warmup_ratio": 0.06, "effective_batch_size": args.batch}
    key = combination_key(MODEL, args.precision, "full")
    context = TrialContext(sweep=config.model_dump(mode="json"), tokenized={MODEL: str(tokenized)},
                           label_names=prepared.label_names, micro_batches={key: args.batch},
                           eval_batches={key: 64}, tracking_uri="", experiment_id="", parent_run_id="")
    return Setup(config, params, context, work)


def run_untracked(s: Setup, order: int) -> Run:
    from finesweep.search.tuning.trainable import build_plan
    from finesweep.trainer.trial import train

    out = s.work / f"trial-{order}"
    started, cpu = time.perf_counter(), time.process_time()
    plan = build_plan(s.params, s.context, str(out))
    sink = KeepingSink()
    quiet(train, plan, sink)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    shutil.rmtree(out, ignore_errors=True)
    return _run("none", order, wall, cpu, sink, [])


def run_tracked(s: Setup, arm: str, store: dict[str, str], order: int) -> Run:
    """search/tuning/trainable.py `run_trial` step by step, without Ray (its `sink_for` and `record_end` are the
    real code a trial runs; a Tune session's trial id and name are made up here)."""
    from finesweep.search.tracking.client import Tracker
    from finesweep.search.tracking.tags import TRIAL_TAG
    from finesweep.search.tuning.trainable import record_end, sink_for, build_plan
    from finesweep.trainer.trial import train

    out, calls = s.work / f"trial-{order}", []
    trial_id = f"bench{order:04d}"
    started, cpu = time.perf_counter(), time.process_time()
    built = time.perf_counter()
    tracker = TimedTracker(Tracker(store["uri"], store["spool"]), calls)
    calls.append(Call("trial", "Tracker()", time.perf_counter() - built))
    run_id = tracker.trial_run(store["experiment_id"], store["parent"], trial_id) or tracker.start_run(
        store["experiment_id"], f"trial-{trial_id}", {TRIAL_TAG: trial_id}, store["parent"])
    plan = build_plan(s.params, s.context, str(out))
    tracker.log_params(run_id, plan.params())
    search = s.config.search
    sink = PhaseSink(sink_for(plan, tracker, run_id, (search.metric, search.mode)), tracker)
    quiet(train, plan, sink)
    tracker.phase = "trial"
    record_end(tracker, run_id, "completed", None)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    shutil.rmtree(out, ignore_errors=True)
    return _run(arm, order, wall, cpu, sink, calls)


def quiet(fn: Callable[..., Any], *args: Any) -> Any:
    """The Trainer prints every log line (disable_tqdm): kept off the benchmark's output, in both arms alike."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def _run(arm: str, order: int, wall: float, cpu: float, sink: KeepingSink, calls: list[Call]) -> Run:
    last = sink.evaluations[-1][1].get("eval_loss", float("nan")) if sink.evaluations else float("nan")
    return Run(arm, order, wall, len(sink.evaluations), len(sink.logs), last, cpu, calls)


# --- the summary -----------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def median_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarize(runs: list[Run]) -> dict[str, Any]:
    """Per store: medians of trial wall time and of tracking time (whole trial, per trial, per evaluation, per log)."""
    none = [r for r in runs if r.arm == "none"]
    base = median([r.wall_s for r in none])
    out: dict[str, Any] = {"none": {"trial_s": base, "runs": len(none), "cpu_s": median([r.cpu_s for r in none]),
                                    "server_cpu_s": median_known([r.server_cpu_s for r in none])}}
    for arm in ARMS[1:]:
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            continue
        wall = median([r.wall_s for r in mine])
        tracking = median([r.tracking_s for r in mine])
        out[arm] = {
            "runs": len(mine), "trial_s": wall, "tracking_s_per_trial": tracking, "cpu_s": median([r.cpu_s for r in mine]),
            "server_cpu_s": median_known([r.server_cpu_s for r in mine]),
            "per_trial_calls_s": median([r.phase_s("trial") for r in mine]),
            "per_evaluation_s": median([r.phase_s("evaluation") / r.evaluations for r in mine]),
            "per_log_line_s": median([r.phase_s("log") / max(r.log_lines, 1) for r in mine]),
            "per_evaluation_interval_s": median([(r.phase_s("evaluation") + r.phase_s("log")) / r.evaluations for r in mine]),
            "tracker_calls_per_trial": median([len(r.calls) for r in mine]),
            "overhead_ratio": median([r.tracking_s / r.wall_s for r in mine]),
            "whole_trial_difference_ratio": (wall - base) / base,
            "cpu_difference_ratio": (median([r.cpu_s for r in mine]) - out["none"]["cpu_s"]) / out["none"]["cpu_s"],
            "max_tracking_s_per_trial": max(r.tracking_s for r in mine),
            "slowest_call": max((c for r in mine for c in r.calls), key=lambda c: c.seconds).__dict__,
        }
    return out


def table(summary: dict[str, Any]) -> str:
    rows = ["| store | trials (without + with) | trial s, without / with | trial CPU s, without / with | "
            "tracking s / trial (of which once per trial) | ms / evaluation | ms / log line | ms / eval interval | "
            "tracking / trial time | server CPU s / trial, without / with |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    base = summary["none"]
    for arm, label in (("sqlite", "embedded SQLite"), ("server", "mlflow server (HTTP)")):
        if arm not in summary:
            continue
        s = summary[arm]
        server = (f"{base['server_cpu_s']:.2f} / {s['server_cpu_s']:.2f}" if arm == "server" and s["server_cpu_s"] is not None
                  and base["server_cpu_s"] is not None else "-")
        rows.append(f"| {label} | {base['runs']} + {s['runs']} | {base['trial_s']:.1f} / {s['trial_s']:.1f} "
                    f"({s['whole_trial_difference_ratio']:+.1%}) | {base['cpu_s']:.1f} / {s['cpu_s']:.1f} | "
                    f"{s['tracking_s_per_trial']:.2f} ({s['per_trial_calls_s']:.2f}) | {s['per_evaluation_s'] * 1000:.0f} | "
                    f"{s['per_log_line_s'] * 1000:.0f} | {s['per_evaluation_interval_s'] * 1000:.0f} | "
                    f"{s['overhead_ratio']:.2%} | {server} |")
    return "\n".join(rows)


# --- main ------------------------------------------------------------------------------------------------------


def schedule(repeats: int, arms: tuple[str, ...]) -> list[str]:
    """The order of the runs, balanced so that every arm has the same mean position (a steady drift of the shared
    machine then shifts every arm's runs alike): rotated rounds when repeats is a multiple of the number of arms
    (ABC CAB BCA), else mirrored rounds, balanced for an even number of repeats (ABC CBA)."""
    k = len(arms)
    if repeats % k == 0:
        return [arms[(i - r) % k] for r in range(repeats) for i in range(k)]
    return [arm for r in range(repeats) for arm in (arms if r % 2 == 0 else arms[::-1])]


def mean_positions(order: list[str]) -> dict[str, float]:
    return {arm: statistics.mean(i for i, a in enumerate(order, start=1) if a == arm) for arm in dict.fromkeys(order)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per arm (default 3)")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--batch", type=int, default=8, help="effective batch = micro-batch (no accumulation)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--train-rows", type=int, default=2000)
    parser.add_argument("--validation-rows", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-server", action="store_true", help="only the embedded SQLite store")
    parser.add_argument("--out", type=Path, help="default: tracking-tweets-<cpu kind>-<date>-<commit>.json here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import logging
    import warnings

    args = parse_args(argv)
    import ray.tune  # noqa: F401  TuneMlflowSink imports it at the first evaluation: not inside a timed trial
    import transformers

    transformers.logging.set_verbosity_error()  # the model-load report of the truncated encoder, at every trial
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore", message=".*only be called inside a function that is executed by a Tuner.*")
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="finesweep-tracking-bench-"))
    server = None
    try:
        s = setup(args, work)
        stores = {"sqlite": open_store(f"sqlite:///{(work / 'sweep' / 'mlflow.db').resolve()}", work / "sweep")}
        if not args.no_server:
            (work / "server").mkdir()
            server, url = start_server(work / "server" / "data")
            stores["server"] = open_store(url, work / "sweep-remote")
        arms = tuple(a for a in ARMS if a == "none" or a in stores)
        cold = {arm: cold_start(store) for arm, store in stores.items()}
        print(f"fresh worker's first tracking calls: {json.dumps(cold)}", flush=True)
        warm = run_untracked(s, 0)  # imports, first allocations, file cache: paid by no measured run
        print(f"warm-up (not counted): {warm.wall_s:.1f} s, {warm.evaluations} evaluations", flush=True)
        runs, order_of_runs = [], schedule(args.repeats, arms)
        for order, arm in enumerate(order_of_runs, start=1):
            before = group_cpu_s(server.pid) if server is not None else None
            run = run_untracked(s, order) if arm == "none" else run_tracked(s, arm, stores[arm], order)
            if before is not None:
                run.server_cpu_s = group_cpu_s(server.pid) - before
            runs.append(run)
            print(f"{order:2d} {arm:6s} trial {run.wall_s:6.1f} s  CPU {run.cpu_s:6.1f} s  tracking {run.tracking_s:6.3f} s in "
                  f"{len(run.calls)} calls  last eval_loss {run.last_eval_loss:.6f}", flush=True)
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(runs)
    summary["mean_position"] = mean_positions(order_of_runs)
    write_results(args, s, warm, runs, summary, cold, time.perf_counter() - began)
    print(table(summary))


def write_results(args: argparse.Namespace, s: Setup, warm: Run, runs: list[Run], summary: dict[str, Any],
                  cold: dict[str, dict[str, float]], total: float) -> None:
    import mlflow
    import torch
    import transformers

    losses = {round(r.last_eval_loss, 6) for r in [warm, *runs]}
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                       "torch": torch.__version__, "transformers": transformers.__version__,
                                                       "mlflow": mlflow.__version__},
        "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "model": MODEL,
                     "sweep_file": str(SWEEP_FILE.relative_to(REPO)), "params": s.params,
                     "logging_steps": max(1, args.eval_every // 5)},
        "same_trial_every_time": len(losses) == 1, "last_eval_losses": sorted(losses),
        "warm_up_s": warm.wall_s, "total_s": total, "summary": summary, "goal_ratio": GOAL,
        "fresh_worker_first_calls_s": cold,
        "runs": [{**{k: v for k, v in r.__dict__.items() if k != "calls"}, "tracking_s": r.tracking_s,
                  "calls": [c.__dict__ for c in r.calls]} for r in runs],
    }
    recorded = naming.facts()
    result = {**recorded, **result}
    args.out = args.out or naming.result_path(REPO / "benchmarks" / "tracking", "tracking", "tweets", recorded)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} (whole run {total:.0f} s; same final eval_loss in every run: {result['same_trial_every_time']})")


if __name__ == "__main__":
    main()
