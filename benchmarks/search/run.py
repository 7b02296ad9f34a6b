"""Search efficiency under a fixed compute budget: finesweep TPE + ASHA, random search, and the Trainer's own search.

Budget B = total training steps across all trials (the same for every method). On the example's data (a seeded
smaller split of `sweeps/tweets.yaml`'s tweets) and the example's small real models (pretrained MiniLM truncated to
each of `--layers`: the model is a dimension of the search), each method searches for the lowest validation loss:

(a) finesweep, `algorithm: tpe`, `scheduler: asha`, `step_budget: B` (num_trials large enough not to bind);
(b) finesweep, `algorithm: random`, `scheduler: none`, B / S trials of S steps;
(c) `transformers.Trainer.hyperparameter_search(backend="optuna")` with its default space (and Optuna's default
    TPE sampler, seeded, and MedianPruner), trials of S steps, until B steps are spent.

(a) and (b) run through finesweep's real CLI (one trial at a time, so the budget order is well defined) and every
evaluation is read back from the sweep's MLflow store; (c) records its evaluations with a TrainerCallback. For each
method and seed: the best validation loss, the test accuracy of the model it hands back, and the budget fraction
at which its best-so-far first reaches random search's final best. Writes
`benchmarks/search/search-tweets-<cpu kind>-<date>-<commit>.json` and prints Markdown tables. Ablations
(`--methods tpe_asha_grace3 tpe_no_asha`) can reuse random search's runs of an
earlier results file (`--random-from`). Run from the repository root (see benchmarks/README.md for the figures):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/search/run.py [--seeds 0 1 2] [--layers 3 1] [--steps 75] \
        [--budget-trials 12]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "sweeps" / "tweets.yaml"
# A fresh run writes search-tweets-<cpu kind>-<date>-<commit>.json here; --resume and --tables name their file.
RECORDED = naming.facts()
RESULTS = naming.result_path(Path(__file__).resolve().parent, "search", "tweets", RECORDED)
SPLITS = {"train": 4000, "validation": 500, "test": 1000}
DATA_SEED = 0  # one split for every method and seed: the seeds vary the searches, not the data
# The example's dimensions (model, precision, batch, learning rate) as a user who does not know the right rate would
# set them: the rate over 3 decades (log). Measured before the run (3 layers, batch 16, 150 steps, validation loss
# after 150 steps): 1e-5 1.083, 5e-5 1.039, 1e-4 0.881, 3e-4 0.931, 1e-3 0.836, 3e-3 1.041, 1e-2 1.052 (the class
# prior is about 1.05): a good band of about one decade, the rest at or near the prior.
SPACE = {"learning_rate": {"low": 1.0e-5, "high": 1.0e-2, "log": True}, "effective_batch_size": [8, 16, 32],
         "precision": ["fp32", "bf16"], "method": ["full"], "warmup_ratio": 0.06, "weight_decay": 0.01}
METRIC = "eval_loss"
METHODS = ("tpe_asha", "random", "hf_optuna")
# Ablations (not run by default): TPE + ASHA whose first rung is the 2nd or 3rd evaluation instead of the 1st, and TPE
# with the step budget but no early stopping. They tell whether a shortfall of tpe_asha comes from ASHA or from TPE.
ABLATIONS = ("tpe_asha_grace2", "tpe_asha_grace3", "tpe_no_asha")
GOAL_FRACTION = 1 / 3  # the goal: TPE+ASHA reaches random search's final best with at most a third of the budget
THREADS = 2


@dataclass
class Settings:
    seeds: list[int]
    steps: int  # S: max_steps of one trial
    budget_trials: int  # B = budget_trials x S
    layers: list[int]  # one candidate model per entry; Trainer.hyperparameter_search gets the first
    work: Path
    methods: list[str]
    results: Path = RESULTS

    @property
    def budget(self) -> int:
        return self.budget_trials * self.steps

    @property
    def eval_every(self) -> int:
        return max(1, self.steps // 5)


@dataclass
class MethodRun:
    """One method on one seed: every evaluation as (steps spent so far, metric), and what it handed back."""

    method: str
    seed: int
    curve: list[tuple[int, float]] = field(default_factory=list)
    best_val: float = math.inf
    test_accuracy: float | None = None
    steps_spent: int = 0
    trials: int = 0
    wall_s: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


# --- (a), (b): finesweep through its CLI ----------------------------------------------------------------------


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def small_model(layers: int) -> dict[str, Any]:
    """The example's pretrained MiniLM truncated to `layers` layers, with transformers' [CLS] head."""
    base = example()["models"][0]
    return {"name": f"minilm-l{layers}", "path": base["path"], "config_overrides": {"num_hidden_layers": layers}}


def sweep_file(method: str, seed: int, s: Settings) -> dict[str, Any]:
    """The generated sweep: the example's data and model, the benchmark's space, the method's search."""
    data = {**example()["data"], "splits": SPLITS, "seed": DATA_SEED}
    # fit_to_budget off: every method trains trials of S steps, as the published figures were measured (the plan
    # would cap num_trials at the trials the step budget starts, which this comparison leaves to the budget).
    search: dict[str, Any] = {"metric": METRIC, "mode": "min", "max_steps": s.steps, "eval_every_steps": s.eval_every,
                              "max_concurrent_trials": 1, "keep_checkpoints": 1, "fit_to_budget": False}
    if method.startswith("tpe"):
        grace = int(method.rpartition("grace")[2]) if "grace" in method else 1
        shortest = s.steps if method == "tpe_no_asha" else grace * s.eval_every  # the shortest trial there can be
        # num_trials does not bind: even if every trial were as short as can be, the budget would run out first.
        # (finesweep's TPE samples its first max(2, (B / S) // 3) trials at random: B / S = trials B pays for in full.)
        search.update(algorithm="tpe", scheduler="none" if method == "tpe_no_asha" else "asha",
                      asha={"grace_period": grace, "reduction_factor": 3}, step_budget=s.budget,
                      num_trials=s.budget // shortest + 1)
    else:
        search.update(algorithm="random", scheduler="none", num_trials=s.budget_trials)
    models = [small_model(n) for n in s.layers]
    return {"name": "bench-search", "seed": seed, "output_root": ".", "data": data, "models": models, "space": SPACE,
            "search": search, "resources": {"cpus_per_trial": THREADS, "memory_budget": "6GiB"},
            "export": {"quantization": ["none"], "register_model": False}}


def run_finesweep(method: str, seed: int, s: Settings) -> MethodRun:
    folder = s.work / f"{method}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep_file(method, seed, s), sort_keys=False))
    sweep_dir = folder / "bench-search"
    shared_cache = s.work / "cache"
    if shared_cache.is_dir():  # data and probe are keyed by content: the first run's are every run's
        shutil.copytree(shared_cache, sweep_dir / "cache")
    started = time.perf_counter()
    with (folder / "cli.log").open("w") as log:
        done = subprocess.run([sys.executable, "-m", "finesweep.search.cli", "run", "sweep.yaml"], cwd=folder,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{method} seed {seed}: finesweep exited {done.returncode}; see {folder / 'cli.log'}")
    if not shared_cache.is_dir():
        shutil.copytree(sweep_dir / "cache", shared_cache)
    run = MethodRun(method, seed, wall_s=round(wall, 1))
    evaluations = read_evaluations(sweep_dir)
    run.curve, run.trials = budget_curve(evaluations), len({e["run_id"] for e in evaluations})
    run.steps_spent = run.curve[-1][0] if run.curve else 0
    run.best_val = min(v for _, v in run.curve)
    summary = json.loads((sweep_dir / "summary.json").read_text())
    run.test_accuracy = summary["test_metrics"]["full"]["accuracy"]
    run.notes = {"export_best": summary["best"]["value"], "end_states": end_states(sweep_dir)}
    prune(sweep_dir)
    return run


def prune(sweep_dir: Path) -> None:
    """Drop the checkpoints once everything is read: a sweep keeps 2 to 3 GB of them here (model and optimizer
    state at each kept evaluation), and 15 sweeps filled the shared disk. The MLflow store, summary.json, the
    export's metrics.json and the CLI log stay."""
    shutil.rmtree(sweep_dir / "tune", ignore_errors=True)
    for folder in (sweep_dir / "export").glob("model*"):
        shutil.rmtree(folder, ignore_errors=True)


def _store(sweep_dir: Path):
    from mlflow import MlflowClient

    state = json.loads((sweep_dir / "sweep-state.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    trials = client.search_runs([state["experiment_id"]],
                                filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    return client, trials


def read_evaluations(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every evaluation of every trial, from the sweep's MLflow store, in the order they happened."""
    client, trials = _store(sweep_dir)
    rows = [{"run_id": r.info.run_id, "time": m.timestamp, "step": m.step, "value": m.value}
            for r in trials for m in client.get_metric_history(r.info.run_id, METRIC)]
    return sorted(rows, key=lambda e: (e["time"], e["step"]))


def end_states(sweep_dir: Path) -> dict[str, int]:
    _, trials = _store(sweep_dir)
    states: dict[str, int] = {}
    for run in trials:
        state = run.data.tags.get("finesweep.end_state", "?").split("_at_step_")[0]
        states[state] = states.get(state, 0) + 1
    return states


def budget_curve(evaluations: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(steps spent by all trials so far, metric) at each evaluation. One trial runs at a time, so the steps spent
    when an evaluation happens are the finished trials' steps plus this trial's step."""
    reached: dict[str, int] = {}
    curve = []
    for e in evaluations:
        reached[e["run_id"]] = max(reached.get(e["run_id"], 0), int(e["step"]))
        curve.append((sum(reached.values()), float(e["value"])))
    return curve


# --- (c) Trainer.hyperparameter_search -------------------------------------------------------------------------


def tokenized_splits(s: Settings) -> tuple[Any, list[str], Any, Any]:
    """The same splits, tokenized for the same model, through finesweep's data pipeline (cached by content)."""
    from finesweep.spaces import load
    from finesweep.trainer import data, models
    from finesweep.trainer.models import model_vocab_size

    path = s.work / "hf-data.yaml"
    path.write_text(yaml.safe_dump(sweep_file("random", 0, s), sort_keys=False))
    config = load(path)  # the data and model paths resolved as the CLI resolves them
    candidate = config.models[0]
    prepared = data.prepare(config.data, config.seed, s.work / "cache")
    tokenizer = models.load_tokenizer(candidate)
    folder = data.tokenize(prepared, tokenizer, config.data.task, config.data.max_seq_len, s.work / "cache",
                           too_long=config.data.too_long, model_name=candidate.name,
                           vocab_size=model_vocab_size(candidate, False))
    return data.load_tokenized(Path(folder)), prepared.label_names, data.collator(tokenizer, config.data.task), candidate


def budget_callback(budget: int, run: MethodRun, keep: dict[str, Any]):
    """Records every evaluation against the steps spent by all trials so far; stops the last trial and the study
    when the budget is spent; keeps each trial's final weights and the best evaluation's weights."""
    from transformers import TrainerCallback

    from finesweep.trainer.transformers_compat import search_trial_of

    class BudgetCallback(TrainerCallback):
        def __init__(self):
            self.before, self.current, self.trainer = 0, 0, None

        def on_train_begin(self, args, state, control, **kwargs):
            self.before += self.current
            self.current = 0
            run.trials += 1

        def on_step_end(self, args, state, control, **kwargs):
            self.current = state.global_step
            if self.before + self.current >= budget:
                control.should_training_stop = True  # the evaluation due at this step still runs
                search_trial_of(self.trainer).study.stop()  # no further trial after this one

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            value = float(metrics[METRIC])
            run.curve.append((self.before + state.global_step, value))
            if value < run.best_val:
                run.best_val = value
                keep["best_eval"] = _cpu_copy(kwargs["model"])

        def on_train_end(self, args, state, control, **kwargs):
            keep.setdefault("final", {})[search_trial_of(self.trainer).number] = _cpu_copy(kwargs["model"])

    return BudgetCallback()


def _cpu_copy(model) -> dict[str, Any]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def run_hf(seed: int, s: Settings) -> MethodRun:
    import optuna
    import torch
    from transformers import PrinterCallback, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from finesweep.spaces.config import Task
    from finesweep.trainer import models
    from finesweep.trainer.serving.evaluate import evaluate

    torch.set_num_threads(THREADS)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    hf_logging.set_verbosity_error()  # the new head's load report, once per trial
    splits, labels, collate, candidate = tokenized_splits(s)
    run, keep = MethodRun("hf_optuna", seed), {}
    callback = budget_callback(s.budget, run, keep)
    args = TrainingArguments(output_dir=str(s.work / f"hf-seed{seed}"), max_steps=s.steps, eval_strategy="steps",
                             eval_steps=s.eval_every, save_strategy="no", logging_steps=s.eval_every, bf16=True,
                             use_cpu=True, per_device_eval_batch_size=64, seed=seed, report_to="none",
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model_init=lambda trial=None: models.load_model(candidate, Task.classification, labels), args=args,
                      train_dataset=splits["train"], eval_dataset=splits["validation"], data_collator=collate,
                      callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # every log line printed (disable_tqdm puts it there)
    callback.trainer = trainer
    started = time.perf_counter()
    # hp_space unset: the Trainer's default Optuna space. Optuna's defaults otherwise (TPE, MedianPruner), the
    # sampler seeded so that seeds differ reproducibly. n_trials does not bind: the budget callback ends the study.
    best = trainer.hyperparameter_search(direction="minimize", backend="optuna", n_trials=5 * s.budget_trials + 1,
                                         sampler=optuna.samplers.TPESampler(seed=seed))
    run.wall_s = round(time.perf_counter() - started, 1)
    run.steps_spent = run.curve[-1][0] if run.curve else 0
    model = models.load_model(candidate, Task.classification, labels)
    tests = {}
    for name, weights in (("picked_trial_final", keep["final"][int(best.run_id)]), ("best_evaluation", keep["best_eval"])):
        model.load_state_dict(weights)
        tests[name] = evaluate(model, splits["test"], collate, Task.classification, batch_size=64)["accuracy"]
    run.test_accuracy = tests["picked_trial_final"]
    run.notes = {"best_trial": best.run_id, "best_objective": best.objective, "best_hyperparameters": best.hyperparameters,
                 "test_accuracy": tests}
    return run


# --- report -------------------------------------------------------------------------------------------------------


def reach_fraction(curve: list[tuple[int, float]], target: float, budget: int) -> float | None:
    """The budget fraction at which the best-so-far first reaches `target` (min mode); None if it never does."""
    for spent, value in curve:
        if value <= target:
            return spent / budget
    return None


def best_within(curve: list[tuple[int, float]], steps: float) -> float | None:
    """The best (lowest) value evaluated with at most `steps` spent; None if nothing was evaluated by then."""
    values = [value for spent, value in curve if spent <= steps]
    return min(values) if values else None


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median and min-max; a None ("never") counts as worse than any number."""
    ranked = sorted(values, key=lambda v: math.inf if v is None else v)
    middle = ranked[(len(ranked) - 1) // 2] if len(ranked) % 2 else None
    if len(ranked) % 2 == 0 and ranked:
        low, high = ranked[len(ranked) // 2 - 1], ranked[len(ranked) // 2]
        middle = None if low is None or high is None else (low + high) / 2
    return {"median": middle, "min": ranked[0] if ranked else None, "max": ranked[-1] if ranked else None,
            "values": values}


def summarise(runs: list[MethodRun], s: Settings) -> dict[str, Any]:
    targets = {r.seed: r.best_val for r in runs if r.method == "random"}
    out: dict[str, Any] = {}
    for method in s.methods:
        mine = [r for r in runs if r.method == method and r.seed in targets]
        reach = [reach_fraction(r.curve, targets[r.seed], s.budget) for r in mine]
        out[method] = {"seeds": [r.seed for r in mine], "best_val": spread([r.best_val for r in mine]),
                       "best_val_at_third": spread([best_within(r.curve, s.budget * GOAL_FRACTION) for r in mine]),
                       "test_accuracy": spread([r.test_accuracy for r in mine]), "reach_fraction": spread(reach),
                       "steps_spent": spread([r.steps_spent for r in mine]), "trials": spread([r.trials for r in mine]),
                       "wall_s": spread([r.wall_s for r in mine])}
    return out


def _fmt(cell: dict[str, Any], digits: int = 3) -> str:
    def one(v):
        return "never" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))

    return f"{one(cell['median'])} ({one(cell['min'])}-{one(cell['max'])})"


def table(summary: dict[str, Any]) -> str:
    lines = ["| method | seeds | best val eval_loss | best val eval_loss within B/3 | test accuracy "
             "| budget fraction to reach random's final best | steps spent | trials | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method, row in summary.items():
        third = _fmt(row["best_val_at_third"], 4) if "best_val_at_third" in row else "-"
        lines.append(f"| {method} | {len(row['seeds'])} | {_fmt(row['best_val'], 4)} | {third} | "
                     f"{_fmt(row['test_accuracy'])} | "
                     f"{_fmt(row['reach_fraction'], 2)} | {_fmt(row['steps_spent'], 0)} | {_fmt(row['trials'], 0)} | "
                     f"{_fmt(row['wall_s'], 0)} |")
    return "\n".join(lines)


def seed_table(result: dict[str, Any]) -> str:
    """One row per method and seed: best validation loss, test accuracy, and the fraction (strict, as the goal)."""
    budget = result["settings"]["budget_steps"]
    targets = {r["seed"]: r["best_val"] for r in result["runs"] if r["method"] == "random"}
    lines = ["| seed | method | best val eval_loss | within B/3 | test accuracy | reaches random's final best at | trials |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(result["runs"], key=lambda r: (r["seed"], list(result["summary"]).index(r["method"]))):
        curve = [tuple(c) for c in r["curve"]]
        reach, third = reach_fraction(curve, targets[r["seed"]], budget), best_within(curve, budget * GOAL_FRACTION)
        lines.append(f"| {r['seed']} | {r['method']} | {r['best_val']:.4f} | "
                     f"{'-' if third is None else f'{third:.4f}'} | {r['test_accuracy']:.3f} | "
                     f"{'never' if reach is None else f'{reach:.2f}'} | {r['trials']} |")
    return "\n".join(lines)


def save(runs: list[MethodRun], s: Settings, started: float) -> dict[str, Any]:
    summary = summarise(runs, s)
    result = {
        "settings": {"seeds": s.seeds, "steps_per_trial": s.steps, "eval_every_steps": s.eval_every,
                     "budget_steps": s.budget, "budget_trials": s.budget_trials, "layers": s.layers,
                     "splits": SPLITS, "data_seed": DATA_SEED, "space": SPACE, "metric": METRIC, "threads": THREADS},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, **RECORDED,
        "goal": f"tpe_asha reaches random's final best with at most {GOAL_FRACTION:.2f} of the budget",
        "summary": summary, "runs": [asdict(r) for r in runs],
        "total_wall_s": round(time.perf_counter() - started, 1),
    }
    s.results.write_text(json.dumps(result, indent=1, default=str))
    return result


def earlier_runs(path: Path, s: Settings, methods: tuple[str, ...] = ("random",),
                 every_seed: bool = False) -> list[MethodRun]:
    """The runs of `methods` (of `s.seeds` unless `every_seed`) in an earlier results.json of the same settings."""
    earlier = json.loads(path.read_text())
    mine = {"steps_per_trial": s.steps, "budget_steps": s.budget, "layers": s.layers, "space": SPACE, "splits": SPLITS}
    if any(earlier["settings"].get(k) != v for k, v in mine.items()):
        raise SystemExit(f"--random-from {path}: its settings differ from this run's ({earlier['settings']}); "
                         "run random search again (leave --random-from out) or pass the same --steps/--budget-trials/--layers")
    runs = [MethodRun(**{**r, "curve": [tuple(c) for c in r["curve"]]}) for r in earlier["runs"] if r["method"] in methods]
    return [r for r in runs if every_seed or r.seed in s.seeds]


def retabulate(path: Path, work: Path) -> str:
    """The tables of a results file, its summary computed again from its runs (and written back to it)."""
    result = json.loads(path.read_text())
    given = result["settings"]
    s = Settings(given["seeds"], given["steps_per_trial"], given["budget_trials"], given["layers"], work,
                 list(result["summary"]), path)
    runs = [MethodRun(**{**r, "curve": [tuple(c) for c in r["curve"]]}) for r in result["runs"]]
    result["summary"] = summarise(runs, s)
    path.write_text(json.dumps(result, indent=1, default=str))
    return table(result["summary"]) + "\n\n" + seed_table(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=75, help="max_steps of one trial (S)")
    parser.add_argument("--budget-trials", type=int, default=12, help="B = this x S training steps")
    parser.add_argument("--layers", type=int, nargs="+", default=[3, 1],
                        help="MiniLM layers kept, one candidate model each (the search's model dimension)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS + ABLATIONS)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "bench-search")
    parser.add_argument("--random-from", type=Path, help="results.json of an earlier run with the same settings: "
                        "take random search's runs (the targets) from it instead of running them again")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --results; run the others")
    parser.add_argument("--tables", action="store_true", help="print the tables of --results and stop")
    args = parser.parse_args()
    if args.tables:
        print(retabulate(args.results, args.work))
        return
    methods = ["random"] + [m for m in args.methods if m != "random"]  # random's best is every method's target
    s = Settings(args.seeds, args.steps, args.budget_trials, args.layers, args.work.resolve(), list(methods),
                 args.results)
    s.work.mkdir(parents=True, exist_ok=True)
    started, runs = time.perf_counter(), earlier_runs(args.random_from, s) if args.random_from else []
    if args.resume and args.results.is_file():  # every earlier run is kept: --seeds and --methods add to them
        earlier = earlier_runs(args.results, s, METHODS + ABLATIONS, every_seed=True)
        runs += [r for r in earlier if not (args.random_from and r.method == "random")]
        s.seeds = sorted({r.seed for r in runs} | set(s.seeds))
        s.methods += [m for m in dict.fromkeys(r.method for r in runs) if m not in s.methods]
    for seed in args.seeds:  # seed by seed: an interrupted run still has whole seeds to report
        for method in methods:
            if any(r.method == method and r.seed == seed for r in runs):
                continue
            print(f"[{time.perf_counter() - started:6.0f} s] seed {seed}: {method}", flush=True)
            run = run_hf(seed, s) if method == "hf_optuna" else run_finesweep(method, seed, s)
            print(f"    best {METRIC} {run.best_val:.4f}, test accuracy {run.test_accuracy:.4f}, "
                  f"{run.steps_spent} steps in {run.trials} trials, {run.wall_s:.0f} s", flush=True)
            runs.append(run)
            save(runs, s, started)
    result = save(runs, s, started)
    print(table(result["summary"]) + "\n\n" + seed_table(result))
    print(f"whole run {result['total_wall_s']:.0f} s; results in {s.results}")


if __name__ == "__main__":
    main()
