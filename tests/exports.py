"""What the export and quantization tests share: tokenized splits and collators like trainer.data makes, a tiny
classifier trained a few steps, and the best-evaluation record and sweep config export_best takes."""

from __future__ import annotations

from pathlib import Path

from finesweep.spaces.config import SweepConfig
from tests import tiny

LABELS = ["negative", "neutral", "positive"]


def classification_split(tokenizer, n: int = 64, seed: int = 1):
    """A tokenized, unpadded classification split like trainer.data produces (input_ids, attention_mask, labels)."""
    from datasets import Dataset

    rows = tiny.sentiment_rows(n, seed=seed)
    encoded = tokenizer([r["text"] for r in rows], truncation=True, max_length=32)
    return Dataset.from_dict({**encoded, "labels": [LABELS.index(r["label"]) for r in rows]})


def causal_lm_split(tokenizer, n: int = 24, seed: int = 1):
    """A tokenized causal-LM split: labels are the tokens, -100 on the prompt."""
    from datasets import Dataset

    ids, labels = [], []
    for row in tiny.instruction_rows(n, seed=seed):
        prompt = tokenizer(row["prompt"] + "\n")["input_ids"]
        response = tokenizer(row["response"])["input_ids"] + [tokenizer.eos_token_id]
        ids.append(prompt + response)
        labels.append([-100] * len(prompt) + response)
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids], "labels": labels})


def classification_collate(tokenizer):
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer)


def causal_lm_collate(tokenizer):
    from transformers import DataCollatorForSeq2Seq

    return DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)


def train_classifier(encoder_dir: Path, out_dir: Path, steps: int = 40, pooling: str = "cls") -> Path:
    """The tiny encoder with a 3-label head (transformers' own, or finesweep's mean-pooled one), trained a few steps
    (so predictions have margins), saved with labels."""
    import torch
    from transformers import AutoTokenizer

    from finesweep.spaces import ModelCandidate, Task
    from finesweep.trainer.models import load_model

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    model = load_model(ModelCandidate(name="tiny", path=str(encoder_dir), pooling=pooling), Task.classification, LABELS)
    split = classification_split(tokenizer, n=256, seed=0)
    collate = classification_collate(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        rows = split.select([(step * 16 + i) % len(split) for i in range(16)])
        loss = model(**collate([dict(r) for r in rows])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir



BEST = {
    "trial_id": "trial_0003",
    "step": 40,
    "metric": "eval_accuracy",
    "value": 0.8125,
    "params": {"learning_rate": 0.00123, "effective_batch_size": 16, "precision": "bf16", "model": "tiny"},
    "model": "tiny",
}


def export_config(model_path: Path, task: str = "classification", quantization=("int8",), pooling: str = "cls",
                  **export) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "tiny-sweep",
        "data": {"path": "x.csv", "task": task},
        "models": [{"name": "tiny", "path": str(model_path), "pooling": pooling}],
        "export": {"quantization": list(quantization), **export},
    })
