"""How far one trial gets on the example's data in the time the quickstart's search has: the ceiling of a sweep.

Each configuration is one hand-picked trial, trained with the plain transformers Trainer on the example's own
prepared splits (finesweep's data preparation and tokenization of `sweeps/tweets.yaml`), batches padded to their
longest row, drawn at random or grouped by length (the sweep's trials' default, data.group_by_length), a linear
schedule with 6% warm-up, one CPU thread, scored on the 2,000 test rows at its end. Configurations run two at a time
(two single-threaded processes on the 2 cores, as the sweep's two trials at once do). Pooling `mean` replaces the
[CLS] head of AutoModelForSequenceClassification with a linear layer on the mean of the last hidden states (how the
all-MiniLM checkpoint was trained to embed sentences), as a sweep file's `pooling: mean` does
(trainer/mean_pooling.py; this script keeps its own few lines so its rows stay comparable). Writes
one-trial-tweets-<cpu kind>-<date>-<commit>.json.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quickstart/one_trial.py            # the table in benchmarks/README.md
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quickstart/one_trial.py --one 3 cls random 3e-4 300 32
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# (layers of MiniLM kept, pooling, batch sampling, learning rate, steps, batch): run in these pairs.
PAIRS = [
    [(3, "cls", "group_by_length", 3e-4, 300, 32), (3, "cls", "random", 3e-4, 300, 32)],
    [(3, "cls", "random", 5e-4, 560, 16), (6, "cls", "random", 2e-4, 280, 16)],
    [(3, "mean", "random", 3e-4, 150, 32), (6, "mean", "random", 2e-4, 280, 16)],
    [(6, "cls", "random", 5e-5, 480, 8), (3, "cls", "random", 5e-5, 900, 8)],
    [(6, "mean", "random", 5e-5, 480, 8), (6, "mean", "random", 1e-4, 480, 8)],
    [(6, "cls", "random", 5e-5, 720, 8), (6, "mean", "random", 1e-4, 720, 8)],
    [(6, "mean", "group_by_length", 1e-4, 720, 8), (6, "mean", "random", 1e-4, 720, 8)],
]


def one_trial(layers: int, pooling: str, sampling: str, lr: float, steps: int, batch: int) -> dict:
    import numpy as np
    import torch
    from transformers import AutoTokenizer, Trainer, TrainingArguments

    from finesweep.spaces.loader import load, resolve_path
    from finesweep.trainer.data.pipeline import prepare
    from finesweep.trainer.data.tokenizing import collator, load_tokenized, tokenize

    torch.set_num_threads(1)
    config = load(REPO / "sweeps" / "tweets.yaml")
    cache = REPO / "runs" / "one-trial-benchmark" / "cache"
    prepared = prepare(config.data, config.seed, cache)
    path = resolve_path(config.models[0].path, REPO / "sweeps")
    tokenizer = AutoTokenizer.from_pretrained(path)
    splits = load_tokenized(tokenize(prepared, tokenizer, "classification", config.data.max_seq_len, cache))
    model = _model(path, layers, pooling, len(prepared.label_names))
    args = TrainingArguments(
        output_dir=str(cache.parent / "trainer"), max_steps=steps, learning_rate=lr, weight_decay=0.01,
        warmup_steps=int(0.06 * steps), per_device_train_batch_size=batch, per_device_eval_batch_size=64,
        use_cpu=True, eval_strategy="steps", eval_steps=max(steps // 4, 1), save_strategy="no", report_to="none",
        disable_tqdm=True, seed=config.seed, train_sampling_strategy=sampling)

    def accuracy(prediction) -> dict[str, float]:
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    trainer = Trainer(model=model, args=args, train_dataset=splits["train"], eval_dataset=splits["validation"],
                      data_collator=collator(tokenizer, "classification"), compute_metrics=accuracy)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    test = trainer.evaluate(splits["test"], metric_key_prefix="test")
    return {"layers": layers, "pooling": pooling, "sampling": sampling, "lr": lr, "steps": steps, "batch": batch,
            "samples": steps * batch, "train_seconds": round(seconds, 1),
            "samples_per_second": round(steps * batch / seconds, 2),
            "validation": [(h["step"], round(h["eval_accuracy"], 3), round(h["eval_loss"], 3))
                           for h in trainer.state.log_history if "eval_accuracy" in h],
            "test_accuracy": round(test["test_accuracy"], 4)}


def _model(path: Path, layers: int, pooling: str, labels: int):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification
    from transformers.modeling_outputs import SequenceClassifierOutput

    if pooling == "cls":
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=labels, num_hidden_layers=layers)

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(path, num_hidden_layers=layers, add_pooling_layer=False)
            self.dropout = torch.nn.Dropout(0.1)
            self.head = torch.nn.Linear(self.encoder.config.hidden_size, labels)

        def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            logits = self.head(self.dropout((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)))
            loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
            return SequenceClassifierOutput(loss=loss, logits=logits)

    return MeanPooled()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=6, metavar=("LAYERS", "POOLING", "SAMPLING", "LR", "STEPS", "BATCH"))
    args = parser.parse_args()
    if args.one:
        layers, pooling, sampling, lr, steps, batch = args.one
        print(json.dumps(one_trial(int(layers), pooling, sampling, float(lr), int(steps), int(batch))))
        return
    results = []
    for pair in PAIRS:  # two single-threaded trials at once, as the sweep runs them
        runs = [subprocess.Popen([sys.executable, __file__, "--one", *map(str, trial)], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, cwd=REPO) for trial in pair]
        results += [json.loads(run.communicate()[0].strip().splitlines()[-1]) for run in runs]
    from finesweep.search.probe.device import cpu_identity

    recorded = naming.facts()
    report = {"machine": cpu_identity(), **recorded, "results": results}
    naming.result_path(HERE, "one-trial", "tweets", recorded).write_text(json.dumps(report, indent=1) + "\n")
    for r in results:
        print(f"| {r['layers']} | {r['pooling']} | {r['sampling']} | {r['batch']} | {r['lr']:g} | {r['samples']} | "
              f"{r['train_seconds']} | {r['samples_per_second']} | {r['test_accuracy']} |")


if __name__ == "__main__":
    main()
