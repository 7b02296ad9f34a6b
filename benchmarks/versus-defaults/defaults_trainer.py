"""What a user runs instead of a sweep: transformers' Trainer with its defaults, on the benchmark's split files.

TrainingArguments as they come (learning rate 5e-5, batch 8, linear decay, no warm-up, no weight decay, fp32), on
the CPU with every core, no evaluation or checkpoint during training; then accuracy on the test split (and with
--validation on the validation split, which the sweeps choose by). run.py starts this script in a fresh process and
times the process's whole life (imports and model load included), as a user's script would be timed:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/defaults_trainer.py DATA_DIR MODEL_DIR OUT_DIR --epochs 2

Prints one JSON line last: test (and validation) accuracy, training seconds, optimizer steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, set_seed


def read_split(path: Path) -> tuple[list[str], list[str]]:
    """Texts and labels of one split file (run.py writes them fully quoted: tweets hold bare carriage returns)."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], [row["label"] for row in rows]


def encode(tokenizer, path: Path, label_ids: dict[str, int], max_seq_len: int) -> Dataset:
    texts, labels = read_split(path)
    encoded = tokenizer(texts, truncation=True, max_length=max_seq_len)
    return Dataset.from_dict({**encoded, "labels": [label_ids[label] for label in labels]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="Stop after this many steps (the smoke run).")
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--validation", action="store_true",
                        help="Also score the validation split (after the test split; run.py leaves it off, so that "
                             "the arm's wall time is what a user's script spends).")
    parser.add_argument("--seed", type=int, default=42,
                        help="TrainingArguments' seed (its default: 42), set before the model is made, as "
                             "transformers' example scripts do, so that it draws the new head too.")
    parser.add_argument("--seconds", type=float, default=None,
                        help="Train for this many seconds, as a user who has them sizes the run: max_steps from the "
                             "steps per second of a short timing run of the same recipe, the linear decay ending there.")
    parser.add_argument("--rows-out", type=Path, default=None,
                        help="Write each test row's correctness (1 or 0), one per line, in the test file's order.")
    parser.add_argument("--dropout", type=float, default=None,
                        help="Every dropout rate of the model (hidden, attention, head); unset: the checkpoint's.")
    args = parser.parse_args()

    torch.set_num_threads(os.cpu_count() or 1)
    set_seed(args.seed)
    names = sorted(set(read_split(args.data_dir / "train.csv")[1]))
    label_ids = {name: i for i, name in enumerate(names)}
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    train = encode(tokenizer, args.data_dir / "train.csv", label_ids, args.max_seq_len)
    test = encode(tokenizer, args.data_dir / "test.csv", label_ids, args.max_seq_len)
    rates = {} if args.dropout is None else dict.fromkeys(
        ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"), args.dropout)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(names), id2label=dict(enumerate(names)), label2id=label_ids, **rates)
    max_steps = args.max_steps
    if args.seconds:
        max_steps = max(1, round(args.seconds * _steps_per_second(model, train, tokenizer, args)))
    training = TrainingArguments(
        output_dir=str(args.output_dir), num_train_epochs=args.epochs, max_steps=max_steps, use_cpu=True,
        eval_strategy="no", save_strategy="no", report_to="none", seed=args.seed)
    # processing_class=tokenizer: the default collator then pads each batch to its longest row.
    trainer = Trainer(model=model, args=training, train_dataset=train, processing_class=tokenizer)
    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started
    scores = {"test_accuracy": round(_accuracy(trainer, test, args.rows_out), 4)}
    if args.validation:  # where validation and test disagree, the sweep's choices (made on validation) may too
        validation = encode(tokenizer, args.data_dir / "validation.csv", label_ids, args.max_seq_len)
        scores["validation_accuracy"] = round(_accuracy(trainer, validation), 4)
    print(json.dumps({**scores, "train_seconds": round(train_seconds, 1), "steps": trainer.state.global_step}))


def _accuracy(trainer: Trainer, split: Dataset, rows_out: Path | None = None) -> float:
    predicted = trainer.predict(split)
    right = predicted.predictions.argmax(-1) == predicted.label_ids
    if rows_out is not None:
        rows_out.write_text("".join(f"{int(row)}\n" for row in right))
    return float(right.mean())


TIMED_STEPS, WARM_UP_STEPS = 60, 20


def _steps_per_second(model, train: Dataset, tokenizer, args) -> float:
    """The recipe's optimizer steps per second on this machine: a throwaway copy of the model trains TIMED_STEPS
    steps, the first WARM_UP_STEPS not counted (their start-up is not the run's pace)."""
    import copy

    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, training_args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    clock = Clock()
    timing = TrainingArguments(output_dir=str(args.output_dir / "timing"), max_steps=TIMED_STEPS, use_cpu=True,
                               eval_strategy="no", save_strategy="no", report_to="none", seed=args.seed)
    Trainer(model=copy.deepcopy(model), args=timing, train_dataset=train, processing_class=tokenizer,
            callbacks=[clock]).train()
    return (TIMED_STEPS - WARM_UP_STEPS) / (clock.times[-1] - clock.times[WARM_UP_STEPS - 1])


if __name__ == "__main__":
    main()
