"""An exported classifier with per-class offsets added to its logits, chosen on the validation split and scored on
test: whether a decision rule tuned after training (the classes' priors differ: 43 / 39 / 18 %) gains what the
training cannot. The offsets are a grid search with the first class fixed at 0; ties go to the smallest offsets.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/class_bias.py \
        runs/versus-defaults/tweets/tweets-example-own-budget/export runs/versus-defaults/tweets/data
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from transformers import AutoTokenizer

from defaults_trainer import read_split
from finesweep.spaces import Task
from finesweep.trainer.serving.loader import load_exported
from per_step import MAX_SEQ_LEN
from soup import correct_share

OFFSETS = [round(0.1 * step, 1) for step in range(-15, 16)]
BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", type=Path, help="a sweep's export folder (its model/ is scored)")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = args.export_dir / "model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_exported(model_dir, Task.classification).eval()
    label_ids = {name: i for i, name in model.config.id2label.items()}
    scored = {split: split_logits(model, tokenizer, args.data_dir / f"{split}.csv", label_ids)
              for split in ("validation", "test")}
    offsets = best_offsets(*scored["validation"])
    print(json.dumps({"export_dir": str(args.export_dir), "offsets": [round(value, 2) for value in offsets.tolist()],
                      **{f"{split}_accuracy": correct_share(logits, targets)
                         for split, (logits, targets) in scored.items()},
                      **{f"{split}_accuracy_with_offsets": correct_share(logits + offsets, targets)
                         for split, (logits, targets) in scored.items()}}))


def split_logits(model, tokenizer, path: Path, label_ids: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    texts, labels = read_split(path)
    batches = []
    with torch.no_grad():
        for start in range(0, len(texts), BATCH):
            encoded = tokenizer(texts[start:start + BATCH], truncation=True, max_length=MAX_SEQ_LEN, padding=True,
                                return_tensors="pt")
            batches.append(model(**encoded).logits.float())
    return torch.cat(batches), torch.tensor([label_ids[label] for label in labels])


def best_offsets(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The offsets (first class 0) that score best on these logits; the smallest in sum where several tie."""
    grid = itertools.product(OFFSETS, repeat=logits.shape[1] - 1)
    candidates = [torch.tensor([0.0, *rest]) for rest in grid]
    return max(candidates, key=lambda offsets: (correct_share(logits + offsets, targets), -offsets.abs().sum()))


if __name__ == "__main__":
    main()
