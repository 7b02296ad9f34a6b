"""Data preparation, the public face: read -> clean -> split (cached by content hash) -> tokenize per candidate.

The work lives in readers (file formats), cleaning (rules), splitting (splits, leakage) and tokenizing; this
module wires them, keeps the cache, and owns the DataReport.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from finesweep.spaces import resolve_path
from finesweep.spaces.config import DataConfig, Task
from finesweep.spaces.files import write_json_atomic
from finesweep.trainer.data.cleaning import (
    Drops, Pair, Read, clean, drop_rare_classes, merge_label_spellings, read_pairs, refuse_values_as_labels,
)
from finesweep.trainer.data.lengths import save_histogram
from finesweep.trainer.data.readers import DataError, Source, detect_format, iter_rows, saved_splits
from finesweep.trainer.data.splitting import SPLITS, drop_leaked, label_names, split, split_sizes, to_dataset
from finesweep.trainer.data.tokenizing import publish, tokenize_summary

# Bump when reading, cleaning or splitting changes, so old cache entries are never reused.
CACHE_VERSION = "data-v7"  # v7: text pairs; a label column of values refused with drop_rare_classes off too
REPORT_FILE = "report.json"
PLOT_FILE = "lengths.png"
# A classifier's validation or test split under this many rows moves its accuracy more than a point per row: said in
# the report, since the search picks among trials on validation and the export reports test.
FEW_ROWS = 100
# One class at least this share of the training rows: the report suggests a metric that weighs every class.
MAJORITY_NOTE_SHARE = 0.8


@dataclass
class DataReport:
    """What prepare() read, dropped (and why) and kept per split; tokens: per candidate, lengths and too-long rows."""

    source: str
    rows_in: int
    dropped: dict[str, int]
    dropped_examples: dict[str, list[str]]
    splits: dict[str, int]
    label_counts: dict[str, dict[str, int]] | None
    label_names: list[str] | None
    pre_split: bool = False
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    chat_format: str | None = None  # causal_lm: how the rows held conversations ("train=..., test=..." if they differ)
    merged_labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # spelling -> its class and rows

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = [f"data: {self.source}" + (" (pre-split)" if self.pre_split else ""), f"  rows read: {self.rows_in}"]
        if self.chat_format:
            lines.append(f"  chat format: {self.chat_format}")
        for rule, count in self.dropped.items():
            examples = "; ".join(repr(e) for e in self.dropped_examples.get(rule, []))
            lines.append(f"  dropped {count} ({rule})" + (f", e.g. {examples}" if examples else ""))
        if self.merged_labels:
            lines.append(_merged(self.merged_labels))
        lines.append("  splits: " + ", ".join(f"{name} {n}" for name, n in self.splits.items()))
        for split_name, counts in (self.label_counts or {}).items():
            lines.append(f"  {split_name} labels: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if self.label_counts:
            lines.extend(_majority(self.label_counts.get("train", {})))
            lines.extend(_few_rows(name, self.splits[name], self.pre_split) for name in ("validation", "test")
                         if 0 < self.splits.get(name, FEW_ROWS) < FEW_ROWS)
        lines.extend(_render_tokens(name, entry) for name, entry in self.tokens.items())
        return "\n".join(lines)


def _merged(merged_labels: dict[str, dict[str, Any]]) -> str:
    spellings = ", ".join(f"{spelling!r} -> {entry['class']!r} ({entry['rows']} row{'s' if entry['rows'] != 1 else ''})"
                          for spelling, entry in merged_labels.items())
    return f"  labels merged (the same after data.normalize's folding of case, spaces and Unicode forms): {spellings}"


def _majority(train_counts: dict[str, int]) -> list[str]:
    """A note where one class holds most training rows: accuracy, the classifier's default metric, then rewards
    answering that class, and a trial that learns the others may score no better."""
    rows = sum(train_counts.values())
    if not rows:
        return []
    label, count = max(train_counts.items(), key=lambda item: item[1])
    if count < MAJORITY_NOTE_SHARE * rows:
        return []
    return [f"  note: '{label}' is {100 * count / rows:.0f}% of the training rows, so always answering it scores "
            f"{count / rows:.2f} accuracy; search.metric: eval_f1_macro weighs every class alike"]


def _few_rows(split: str, rows: int, pre_split: bool) -> str:
    """What a small evaluation split means for the accuracy measured on it, and where more rows come from."""
    what = ("trials closer than that on validation are picked by luck" if split == "validation" else
            "the export's test accuracy and its gain over the baseline carry that much noise (their interval says it)")
    fix = f"the {split} file needs more rows" if pre_split else f"data.splits.{split} asks for more rows"
    return (f"  note: {split} holds {rows} row{'s' if rows != 1 else ''}, so one row moves its accuracy by "
            f"{100 / rows:.1f} points: {what}; {fix}")


def _render_tokens(name: str, entry: dict[str, Any]) -> str:
    line = (f"  {name} tokens: p50 {entry['p50']:.0f}, p95 {entry['p95']:.0f}, p99 {entry['p99']:.0f}, max {entry['max']:.0f}; "
            f"{entry['too_long']} rows over max_seq_len {entry['max_seq_len']} "
            f"({'truncated' if entry['too_long_action'] == 'truncate' else 'dropped'})")
    if entry.get("no_response_token"):
        line += f"; {entry['no_response_token']} dropped (no response token left)"
    if entry.get("chat_template"):
        line += "; conversations as " + ("plain text" if entry["chat_template"] == "plain" else "its chat template")
    if entry.get("pad_token") == "eos":
        line += "; no pad token of its own: pads with its end-of-sequence token"
    return line


@dataclass
class PreparedData:
    """A cleaned, split DatasetDict on disk (train/validation/test) and its report; length_plot once measured."""

    folder: Path
    report: DataReport
    label_names: list[str] | None
    length_plot: Path | None = None


def sources(config: DataConfig) -> dict[str | None, Source]:
    """What to read: {None: one source to split} or {split name: source} for pre-split input."""
    path = Path(config.path)
    fmt = detect_format(config.format, path)
    if config.validation_path is not None:
        found = {"train": Source(path, fmt)}
        for name, value in (("validation", config.validation_path), ("test", config.test_path)):
            other = resolve_path(value, path.parent)  # relative to the train file's folder
            found[name] = Source(other, detect_format(config.format, other))
        return found
    names = saved_splits(path) if fmt == "datasets" else None
    if names is None:
        return {None: Source(path, fmt)}
    if set(SPLITS) <= set(names):
        return {name: Source(path, fmt, name) for name in SPLITS}
    if len(names) == 1:
        return {None: Source(path, fmt, names[0])}
    raise DataError(
        f"{path}: a datasets folder with splits {names}; finesweep reads either train, validation and test "
        "(used as they are) or a single split (which it splits). Save the DatasetDict with those split names."
    )


def _read(config: DataConfig, source: Source, drops: Drops) -> Read:
    read = read_pairs(config, source, iter_rows(source, config.encoding), drops)
    if read.rows_in == 0:
        raise DataError(f"{source.name}: the file has no data rows (only a header, or nothing); add examples, one per row.")
    return read


def _chat_format(formats: dict[str | None, str | None]) -> str | None:
    """The one format every source was read as, or each source's when pre-split files differ."""
    if len(set(formats.values())) <= 1:
        return next(iter(formats.values()), None)
    return ", ".join(f"{name}={fmt}" for name, fmt in formats.items())


def _hint(config: DataConfig, drops: Drops) -> str:
    rules = [r for r in ("label_not_allowed", "rare_class", "conflicting_labels") if r in drops.counts]
    if not rules:
        return ""
    # Texts that recur with other labels until no class is left: the text column holds the classes.
    swapped = (f"; conflicting_labels drops every text that recurs with another label: if '{config.text_column}' "
               "holds the classes, swap data.text_column and data.label_column" if "conflicting_labels" in rules else "")
    return f" (rules that removed rows: {', '.join(rules)}{swapped})"


def _split_one(config: DataConfig, pairs: list[Pair], drops: Drops, seed: int) -> tuple[dict[str, list[Pair]], list[str] | None]:
    pairs = drop_rare_classes(config, pairs, drops, len(SPLITS))
    names = label_names(config, pairs, _hint(config, drops)) if config.task == Task.classification else None
    return split(pairs, split_sizes(config, len(pairs)), seed, names), names


def _pre_split(config: DataConfig, parts: dict[str, list[Pair]], drops: Drops) -> tuple[dict[str, list[Pair]], list[str] | None]:
    for name, pairs in parts.items():
        if not pairs:
            raise DataError(f"{config.path}: the {name} split has no rows left after cleaning; every split needs rows.")
    every = [pair for pairs in parts.values() for pair in pairs]
    if config.task == Task.classification:
        refuse_values_as_labels(config, Counter(label for _, label in every), len(SPLITS))
    return parts, label_names(config, every, _hint(config, drops)) if config.task == Task.classification else None


def _label_counts(parts: dict[str, list[Pair]], names: list[str] | None) -> dict[str, dict[str, int]] | None:
    if names is None:
        return None
    counts = {name: Counter(label for _, label in pairs) for name, pairs in parts.items()}
    return {name: {label: c[label] for label in names if c[label]} for name, c in counts.items()}


def _build(config: DataConfig, seed: int, found: dict[str | None, Source], folder: Path) -> DataReport:
    from datasets import DatasetDict

    drops, parts, formats, rows_in = Drops(), {}, {}, 0
    for name, source in found.items():
        read = _read(config, source, drops)
        parts[name], formats[name] = read.pairs, read.chat_format
        rows_in += read.rows_in
    # Spellings merge before the cleaning rules: 'torn' labelled pos and Pos is no conflict.
    merged = merge_label_spellings(config, parts)
    parts = {name: clean(config, pairs, drops) for name, pairs in parts.items()}
    if None in parts:
        parts, names = _split_one(config, parts.pop(None), drops, seed)
    else:
        parts, names = _pre_split(config, parts, drops)
    parts = drop_leaked(config, parts, drops)
    DatasetDict({name: to_dataset(config, parts[name], names) for name in SPLITS}).save_to_disk(str(folder))
    report = DataReport(
        source=", ".join(f"{k}={s.name}" if k else s.name for k, s in found.items()), rows_in=rows_in,
        dropped=drops.counts, dropped_examples=drops.examples, splits={k: len(parts[k]) for k in SPLITS},
        label_counts=_label_counts(parts, names), label_names=names, pre_split=None not in found,
        chat_format=_chat_format(formats), merged_labels=merged,
    )
    write_json_atomic(folder / REPORT_FILE, report.to_dict())
    return report


def _hash_source(digest: "hashlib._Hash", source: Source) -> None:
    files = sorted(p for p in source.path.rglob("*") if p.is_file()) if source.path.is_dir() else [source.path]
    for path in files:
        digest.update(str(path.relative_to(source.path)).encode() if source.path.is_dir() else b"")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)


def _prepare_key(config: DataConfig, seed: int, found: dict[str | None, Source]) -> str:
    digest = hashlib.sha256(CACHE_VERSION.encode())
    for name, source in found.items():
        digest.update(f"{name}:{source.split}".encode())
        _hash_source(digest, source)
    # max_seq_len and too_long are tokenizing choices, not data ones: changing them must not redo the split. The
    # seed is hashed as resolved, so config.seed=5 and a sweep seed of 5 share one entry.
    digest.update(config.model_dump_json(exclude={"max_seq_len", "too_long", "seed"}).encode())
    digest.update(str(seed).encode())
    return digest.hexdigest()[:20]


def prepare(config: DataConfig, seed: int, cache_root: Path) -> PreparedData:
    """Read, clean and split config.path; cached in cache_root/data/<hash of the input, config and seed>."""
    seed = config.seed if config.seed is not None else seed
    found = sources(config)
    final = Path(cache_root) / "data" / _prepare_key(config, seed, found)
    if not (final / REPORT_FILE).is_file():
        work = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        _build(config, seed, found, work)
        publish(work, final)
    report = DataReport(**json.loads((final / REPORT_FILE).read_text(encoding="utf-8")))
    plot = final / PLOT_FILE
    return PreparedData(folder=final, report=report, label_names=report.label_names,
                        length_plot=plot if plot.is_file() else None)


def token_entry(tokenizer: Any, percentiles: dict[str, float], tokenized_folder: Path) -> dict[str, Any]:
    """One candidate's line of the report: length percentiles, rows over the limit, how it pads."""
    summary = tokenize_summary(tokenized_folder)
    per_split = summary["per_split"].values()
    # models.load_tokenizer gives a tokenizer without a pad token its eos token: not an error, but worth saying.
    own_pad = tokenizer.pad_token is not None and tokenizer.pad_token != tokenizer.eos_token
    return {**percentiles, "max_seq_len": summary["max_seq_len"], "too_long_action": summary["too_long_action"],
            "too_long": sum(s["too_long"] for s in per_split),
            "no_response_token": sum(s["no_response_token"] for s in per_split),
            "pad_token": "own" if own_pad else "eos", "chat_template": summary.get("chat_template")}


def finish_report(prepared: PreparedData, tokens: dict[str, dict[str, Any]], lengths: dict[str, Any], max_seq_len: int) -> Path:
    """Add the per-candidate token entries to the report, save it and the length histogram; returns the PNG."""
    prepared.report.tokens = tokens
    write_json_atomic(prepared.folder / REPORT_FILE, prepared.report.to_dict())
    prepared.length_plot = save_histogram(lengths, max_seq_len, prepared.folder / PLOT_FILE)
    return prepared.length_plot
