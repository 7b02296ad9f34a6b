"""Token-length distribution of the training texts, the sequence length that covers them, and its histogram."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from finesweep.spaces import Task
from finesweep.trainer.data import chat
from finesweep.trainer.data.cleaning import TEXT_PAIR
from finesweep.trainer.data.tokenizing import check_marks_pairs

COVERED_PERCENTILE = 99


def token_lengths(prepared_folder: Path, tokenizer, task: Task, sample: int = 5000,
                  chat_template: str | None = None) -> np.ndarray:
    """Token length of every row of (a seeded sample of) the training split, with this tokenizer (and for causal_lm
    the conversation rendered as tokenizing renders it)."""
    train = _training_sample(prepared_folder, sample)
    if task == Task.classification:
        pairs = list(train[TEXT_PAIR]) if TEXT_PAIR in train.column_names else None
        if pairs is not None:
            check_marks_pairs(tokenizer)  # the first place a candidate's tokenizer meets the pairs
        ids = tokenizer(list(train["text"]), pairs, add_special_tokens=True)["input_ids"]
        return np.array([len(row) for row in ids])
    texts = [chat.render(chat.from_cell(cell), tokenizer, chat_template)[0] for cell in train[chat.MESSAGES]]
    ids = tokenizer(texts, add_special_tokens=chat_template is None)["input_ids"]
    return np.array([len(row) for row in ids])


def prompt_lengths(prepared_folder: Path, tokenizer, sample: int = 5000, chat_template: str | None = None) -> np.ndarray:
    """Tokens before the first assistant reply of every (sampled) training conversation, rendered as tokenizing
    renders it: a max_seq_len at or below a row's prompt leaves that row nothing to learn."""
    train = _training_sample(prepared_folder, sample)
    rendered = [chat.render(chat.from_cell(cell), tokenizer, chat_template) for cell in train[chat.MESSAGES]]
    prompts = [text[: spans[0][0]] if spans else text for text, spans in rendered]
    ids = tokenizer(prompts, add_special_tokens=chat_template is None)["input_ids"]
    return np.array([len(row) for row in ids])


def _training_sample(prepared_folder: Path, sample: int):
    """The training split, or a seeded sample of `sample` rows of it."""
    from datasets import load_from_disk

    train = load_from_disk(str(prepared_folder))["train"]
    return train.shuffle(seed=0).select(range(sample)) if len(train) > sample else train


# The percentiles a report keeps: the upper ones size max_seq_len, all of them the plan's padded batch lengths
# (search/budget/padding.py: the longest row of a random batch sits high in the distribution, batches sorted by
# length pad to the whole range).
KEPT_PERCENTILES = (10, 25, 50, 75, 90, 95, COVERED_PERCENTILE)


def percentiles(lengths: np.ndarray) -> dict[str, float]:
    """min, p10 ... p99 (KEPT_PERCENTILES) and max of the lengths."""
    return {"min": float(lengths.min()), **{f"p{q}": float(np.percentile(lengths, q)) for q in KEPT_PERCENTILES},
            "max": float(lengths.max())}


def covering_length(percentiles: dict[str, float], model_limit: int | None) -> int:
    """The p99 length rounded up to a multiple of 8 (friendlier kernels), capped by the model's limit."""
    length = max(8, int(-(-percentiles["p99"] // 8) * 8))
    return min(length, model_limit) if model_limit else length


def save_histogram(lengths: dict[str, np.ndarray], max_seq_len: int, path: Path) -> Path:
    """One histogram per candidate tokenizer, with max_seq_len marked, as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in Ray workers
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    top = max(int(max(v.max() for v in lengths.values())), max_seq_len) + 1
    bins = np.linspace(0, top, min(top, 60) + 1)
    for name, values in lengths.items():
        axes.hist(values, bins=bins, alpha=0.5, label=f"{name} (p99 {np.percentile(values, COVERED_PERCENTILE):.0f})")
    axes.axvline(max_seq_len, color="black", linestyle="--", label=f"max_seq_len {max_seq_len}")
    axes.set(xlabel="tokens per training row", ylabel="rows", title="Token lengths of the training split")
    axes.legend()
    work = path.with_name(f"{path.stem}.tmp-{id(figure)}{path.suffix}")
    figure.savefig(work, dpi=100)
    plt.close(figure)
    work.replace(path)
    return path
