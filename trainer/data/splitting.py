"""Seeded, stratified train/validation/test splits, and the leakage check that keeps them apart."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from finesweep.spaces.config import DataConfig, Task
from finesweep.trainer.data.chat import ASSISTANT, MESSAGES, from_cell, to_cell
from finesweep.trainer.data.cleaning import TEXT_PAIR, Drops, Pair, split_text_pair, text_key
from finesweep.trainer.data.readers import DataError

if TYPE_CHECKING:
    from datasets import Dataset

SPLITS = ("train", "validation", "test")


def _sizes(asked: dict[str, float], available: int) -> dict[str, int]:
    if any(v >= 1 for v in asked.values()):
        return {name: int(asked[name]) for name in SPLITS}
    val, test = (int(round(available * asked[name])) for name in ("validation", "test"))
    train = available - val - test  # fractions summing to 1 give train every row left
    if sum(asked.values()) < 1 - 1e-9:
        train = min(train, int(round(available * asked["train"])))
    return {"train": train, "validation": val, "test": test}


def _enough(sizes: dict[str, int], available: int) -> bool:
    return min(sizes.values()) >= 1 and sum(sizes.values()) <= available


def split_sizes(config: DataConfig, available: int) -> dict[str, int]:
    """Rows per split: fractions of the cleaned rows, or the row counts asked for; DataError if too few rows."""
    asked = config.splits.model_dump()
    sizes = _sizes(asked, available)
    if not _enough(sizes, available):
        needed = next(n for n in range(available + 1, 10**9) if _enough(_sizes(asked, n), n))
        raise DataError(
            f"{config.path}: {available} rows are left after cleaning, but data.splits "
            f"(train {asked['train']:g}, validation {asked['validation']:g}, test {asked['test']:g}) need at least "
            f"{needed}, with every split at least 1 row. Add rows, or lower data.splits in the sweep file."
        )
    return sizes


def _quotas(classes: np.ndarray, size: int) -> dict[int, int]:
    """Rows per class in a split of `size`: proportional, the leftover rows to the largest remainders (ties: class id)."""
    ids, counts = np.unique(classes, return_counts=True)
    exact = counts * size / len(classes)
    quota = np.floor(exact).astype(int)
    order = np.argsort(-(exact - quota), kind="stable")
    quota[order[: size - int(quota.sum())]] += 1
    return dict(zip(ids.tolist(), quota.tolist()))


def _take(pool: np.ndarray, labels: np.ndarray | None, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(`size` indices of pool, the rest), in a seeded random order; stratified by label when labels are given."""
    shuffled = rng.permutation(pool)
    if labels is None or size == len(pool):
        return shuffled[:size], shuffled[size:]
    classes = labels[shuffled]
    chosen = np.zeros(len(shuffled), dtype=bool)
    for label, quota in _quotas(classes, size).items():
        chosen[np.flatnonzero(classes == label)[:quota]] = True
    return shuffled[chosen], shuffled[~chosen]


def split(pairs: list[Pair], sizes: dict[str, int], seed: int, names: list[str] | None) -> dict[str, list[Pair]]:
    """Seeded splits of the pairs (stratified when names are given). numpy's PCG64 permutations are the same on
    every machine and version, so the same input and seed give the same splits everywhere."""
    rng = np.random.default_rng(seed)
    labels = None
    if names is not None:
        index = {name: i for i, name in enumerate(names)}
        labels = np.array([index[label] for _, label in pairs])
    test, rest = _take(np.arange(len(pairs)), labels, sizes["test"], rng)
    validation, rest = _take(rest, labels, sizes["validation"], rng)
    train, _ = _take(rest, labels, sizes["train"], rng)
    return {name: [pairs[i] for i in chosen] for name, chosen in (("train", train), ("validation", validation), ("test", test))}


def label_names(config: DataConfig, pairs: list[Pair], hint: str) -> list[str]:
    """Sorted distinct labels; DataError below two (`hint` says which rules may have removed the others)."""
    names = sorted({label for _, label in pairs})
    if len(names) < 2:
        raise DataError(
            f"{config.path}: column '{config.label_column}' holds {len(names)} distinct label(s) {names} after cleaning{hint}; "
            "classification needs at least 2. Check data.label_column (and data.allowed_labels), or use task: causal_lm."
        )
    return names


def to_dataset(config: DataConfig, pairs: list[Pair], names: list[str] | None) -> "Dataset":
    """An Arrow dataset of the pairs; labels as ClassLabel ids (id = index in `names`), shared by every split."""
    from datasets import ClassLabel, Dataset, Features, Value

    if config.task != Task.classification:
        # One column of whole conversations (JSON text): the chat template is the tokenizer's business, per candidate.
        return Dataset.from_dict({MESSAGES: [to_cell(from_cell(context) + [{"role": ASSISTANT, "content": reply}])
                                             for context, reply in pairs]})
    index = {name: i for i, name in enumerate(names or [])}
    labels = {"label": [index[p[1]] for p in pairs]}
    if config.text_pair_column is None:
        features = Features({"text": Value("string"), "label": ClassLabel(names=names)})
        return Dataset.from_dict({"text": [p[0] for p in pairs], **labels}, features=features)
    # Text pairs: the two texts in columns of their own, as the tokenizer takes them (text, text_pair).
    firsts, seconds = zip(*(split_text_pair(p[0]) for p in pairs)) if pairs else ((), ())
    features = Features({"text": Value("string"), TEXT_PAIR: Value("string"), "label": ClassLabel(names=names)})
    return Dataset.from_dict({"text": list(firsts), TEXT_PAIR: list(seconds), **labels}, features=features)


def drop_leaked(config: DataConfig, parts: dict[str, list[Pair]], drops: Drops) -> dict[str, list[Pair]]:
    """Remove from train the pairs whose text (prompt) also appears, after normalisation, in validation or test.

    Evaluation on a text the model trained on overstates the metric; the held-out splits are kept whole because
    their sizes were asked for. After de-duplication this only finds something in pre-split input or with
    drop_duplicates off.
    """
    if not config.drop_leaked:
        return parts
    held_out = {text_key(config, text) for name in ("validation", "test") for text, _ in parts[name]}
    train = []
    for pair in parts["train"]:
        if text_key(config, pair[0]) in held_out:
            drops.add("leaked_into_train", (pair[0], ""))
        else:
            train.append(pair)
    return {**parts, "train": train}
