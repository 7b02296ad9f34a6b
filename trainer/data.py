"""Data preparation: read CSV/TSV/JSONL/Parquet faithfully, clean, split, tokenize; every step cached by content hash."""

from __future__ import annotations

import codecs
import csv
import difflib
import hashlib
import io
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finesweep.spaces.config import DataConfig, Task

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

log = logging.getLogger(__name__)

# Bump when cleaning, splitting or tokenizing changes, so old cache entries are never reused.
CACHE_VERSION = "data-v1"
SPLITS = ("train", "validation", "test")
EXAMPLES_KEPT = 3
EXAMPLE_CHARS = 80
ENCODING_FIX = "set data.encoding: latin-1 (or cp1252) in the sweep file"
csv.field_size_limit(1 << 30)  # long documents are legitimate inputs, not a reason to fail


class DataError(ValueError):
    """User-facing: one paragraph naming the file, the column or line, the rule, what was found, and the fix."""


@dataclass
class DataReport:
    """What prepare() read, dropped (and why) and kept per split."""

    source: str
    rows_in: int
    dropped: dict[str, int]
    dropped_examples: dict[str, list[str]]
    splits: dict[str, int]
    label_counts: dict[str, dict[str, int]] | None
    label_names: list[str] | None

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = [f"data: {self.source}", f"  rows read: {self.rows_in}"]
        for rule, count in self.dropped.items():
            examples = "; ".join(repr(e) for e in self.dropped_examples.get(rule, []))
            lines.append(f"  dropped {count} ({rule})" + (f", e.g. {examples}" if examples else ""))
        lines.append("  splits: " + ", ".join(f"{name} {n}" for name, n in self.splits.items()))
        for split, counts in (self.label_counts or {}).items():
            lines.append(f"  {split} labels: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return "\n".join(lines)


@dataclass
class PreparedData:
    """A cleaned, split DatasetDict on disk (train/validation/test) and its report."""

    folder: Path
    report: DataReport
    label_names: list[str] | None


def _format_of(config: DataConfig, path: Path) -> str:
    if config.format != "auto":
        return config.format
    by_suffix = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
    fmt = by_suffix.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"{path}: cannot tell the file format from the extension '{path.suffix}'; the known extensions are "
            f"{', '.join(by_suffix)}. Rename the file or set data.format (csv, tsv, jsonl or parquet) in the sweep file."
        )
    return fmt


def _codec(encoding: str) -> str:
    """utf-8 also reads a file that starts with a byte order mark (Excel writes one)."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise DataError(f"data.encoding '{encoding}' is not a text encoding Python knows; use e.g. utf-8, latin-1 or cp1252.") from None
    return "utf-8-sig" if name == "utf-8" else name


def _decode(path: Path, raw: bytes, encoding: str) -> str:
    try:
        return raw.decode(_codec(encoding))
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}: line {line} (byte offset {err.start}) holds byte 0x{raw[err.start]:02x}, which is not valid "
            f"{encoding}: the file is in another text encoding. Fix: {ENCODING_FIX}."
        ) from None


def _read_delimited(path: Path, text: str, delimiter: str) -> list[dict[str, Any]]:
    # newline="" semantics: quoted fields keep their \r and \n exactly as written; strict: a broken quote is an
    # error at its line, not the rest of the file swallowed into one field.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records, start = [], 1
    try:
        for record in reader:
            records.append(record)
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(
            f"{path}: the record starting at line {start} is not valid CSV ({err}): a quote is not closed, or text follows "
            "a closing quote. Quote fields holding the delimiter, quotes or line breaks, and double the quotes inside them."
        ) from None
    if not records or not any(h.strip() for h in records[0]):
        raise DataError(f"{path}: the file is empty; it needs a header line naming the columns, then one row per example.")
    header = [h.strip() for h in records[0]]
    # A short row leaves its last columns empty (then dropped as empty), as pandas would.
    return [dict(zip(header, row)) for row in records[1:] if row]


def _read_jsonl(path: Path, text: str) -> list[dict[str, Any]]:
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        return _read_json_array(path, text)
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(
                f"{path}: line {number} is not JSON ({err.msg} at column {err.colno}): {line[:EXAMPLE_CHARS]!r}. "
                "Each line of a JSONL file must be one JSON object; fix or delete that line."
            ) from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number} is a JSON {type(row).__name__}, not an object; write one {{...}} per line.")
        rows.append(row)
    return rows


def _read_json_array(path: Path, text: str) -> list[dict[str, Any]]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno} is not valid JSON ({err.msg}); fix the file or write it as JSONL.") from None
    if not all(isinstance(r, dict) for r in rows):
        raise DataError(f"{path}: a JSON file must be a list of objects (one per example); found other values in the list.")
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(
            f"{path}: not a readable Parquet file ({err}). Check that the file really is Parquet, "
            "or set data.format (csv, tsv, jsonl) in the sweep file."
        ) from None


def read_rows(config: DataConfig) -> list[dict[str, Any]]:
    """All rows of config.path as dicts, read with the configured format and encoding."""
    path = Path(config.path)
    if not path.is_file():
        raise DataError(f"{path}: no such file. Check data.path in the sweep file (a relative path is relative to the sweep file).")
    fmt = _format_of(config, path)
    if fmt == "parquet":
        rows = _read_parquet(path)
    else:
        text = _decode(path, path.read_bytes(), config.encoding)
        rows = _read_jsonl(path, text) if fmt == "jsonl" else _read_delimited(path, text, "\t" if fmt == "tsv" else ",")
    if not rows:
        raise DataError(f"{path}: the file has no data rows (only a header, or nothing); add examples, one per row.")
    return rows


def _columns(config: DataConfig) -> tuple[str, str]:
    if config.task == Task.classification:
        return config.text_column, config.label_column
    return config.prompt_column, config.response_column


def _check_columns(config: DataConfig, rows: list[dict[str, Any]]) -> None:
    present = list(rows[0])
    for key, column in zip(("text", "label") if config.task == Task.classification else ("prompt", "response"), _columns(config)):
        if column not in present:
            close = difflib.get_close_matches(column, present, n=1, cutoff=0.4)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise DataError(
                f"{config.path}: no column '{column}' (data.{key}_column); the file has columns {present}. "
                f"{hint}Set data.{key}_column in the sweep file to the right name."
            )


def _cell(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _example(pair: tuple[str, str]) -> str:
    text = " | ".join(part for part in pair if part) or "(empty)"
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


class _Drops:
    """Counts and a few examples of dropped rows, per rule."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, rule: str, pair: tuple[str, str]) -> None:
        self.counts[rule] = self.counts.get(rule, 0) + 1
        kept = self.examples.setdefault(rule, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(_example(pair))


def clean(config: DataConfig, rows: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], _Drops]:
    """(text, label) or (prompt, response) pairs left after the empty, conflicting-label and duplicate rules."""
    first, second = _columns(config)
    drops = _Drops()
    pairs = []
    for row in rows:
        pair = (_cell(row.get(first)), _cell(row.get(second)))
        if pair[0] and pair[1]:
            pairs.append(pair)
        else:
            drops.add("empty", pair)
    if config.task == Task.classification:
        # Before dropping duplicates: dedupe keeps the first label and would hide the conflict.
        pairs = _drop_conflicts(pairs, drops)
    if config.drop_duplicates:
        pairs = _drop_duplicates(pairs, drops, by_text=config.task == Task.classification)
    return pairs, drops


def _drop_conflicts(pairs: list[tuple[str, str]], drops: _Drops) -> list[tuple[str, str]]:
    labels: dict[str, set[str]] = {}
    for text, label in pairs:
        labels.setdefault(text, set()).add(label)
    kept = []
    for pair in pairs:
        if len(labels[pair[0]]) > 1:  # no way to know which label is right: keep none of them
            drops.add("conflicting_labels", pair)
        else:
            kept.append(pair)
    return kept


def _drop_duplicates(pairs: list[tuple[str, str]], drops: _Drops, by_text: bool) -> list[tuple[str, str]]:
    seen: set = set()
    kept = []
    for pair in pairs:
        key = pair[0] if by_text else pair
        if key in seen:
            drops.add("duplicate", pair)
        else:
            seen.add(key)
            kept.append(pair)
    return kept


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


def _take(dataset: "Dataset", size: int, seed: int, stratify: str | None) -> tuple["Dataset", "Dataset"]:
    """(`size` rows, the rest), shuffled by `seed`, stratified when possible."""
    if size == len(dataset):
        return dataset.shuffle(seed=seed), dataset.select([])
    try:
        parts = dataset.train_test_split(test_size=size, seed=seed, stratify_by_column=stratify)
    except ValueError as err:
        if stratify is None:
            raise
        # A label with a single row, or a split smaller than the label count, cannot be stratified.
        log.warning("split of %d rows not stratified: %s", size, err)
        parts = dataset.train_test_split(test_size=size, seed=seed)
    return parts["test"], parts["train"]


def split(dataset: "Dataset", sizes: dict[str, int], seed: int, stratify: str | None) -> "DatasetDict":
    from datasets import DatasetDict

    test, rest = _take(dataset, sizes["test"], seed, stratify)
    validation, rest = _take(rest, sizes["validation"], seed + 1, stratify)
    train, _ = _take(rest, sizes["train"], seed + 2, stratify)
    return DatasetDict(train=train, validation=validation, test=test)


def _to_dataset(config: DataConfig, pairs: list[tuple[str, str]]) -> tuple["Dataset", list[str] | None]:
    from datasets import Dataset

    first, second = ("text", "label") if config.task == Task.classification else ("prompt", "response")
    dataset = Dataset.from_dict({first: [p[0] for p in pairs], second: [p[1] for p in pairs]})
    if config.task != Task.classification:
        return dataset, None
    names = sorted({p[1] for p in pairs})
    if len(names) < 2:
        raise DataError(
            f"{config.path}: column '{config.label_column}' holds {len(names)} distinct label(s) {names} after cleaning; "
            "classification needs at least 2. Check data.label_column, or use task: causal_lm."
        )
    dataset = dataset.class_encode_column("label")  # ClassLabel with sorted names: id = index in label_names
    return dataset, names


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _prepare_key(config: DataConfig, seed: int) -> str:
    digest = hashlib.sha256(CACHE_VERSION.encode())
    digest.update(_file_hash(Path(config.path)).encode())
    # max_seq_len is a tokenizing choice, not a data one: changing it must not redo the split. The seed is
    # hashed as resolved, so config.seed=5 and a sweep seed of 5 share one entry.
    digest.update(config.model_dump_json(exclude={"max_seq_len", "seed"}).encode())
    digest.update(str(seed).encode())
    return digest.hexdigest()[:20]


def _report(config: DataConfig, rows_in: int, drops: _Drops, splits: "DatasetDict", names: list[str] | None) -> DataReport:
    counts = None
    if names is not None:
        counts = {}
        for name, part in splits.items():
            ids = part["label"]
            counts[name] = {label: n for label, n in ((lab, ids.count(i)) for i, lab in enumerate(names)) if n}
    return DataReport(
        source=str(config.path), rows_in=rows_in, dropped=drops.counts, dropped_examples=drops.examples,
        splits={name: len(part) for name, part in splits.items()}, label_counts=counts, label_names=names,
    )


def _build(config: DataConfig, seed: int, folder: Path) -> DataReport:
    rows = read_rows(config)
    _check_columns(config, rows)
    pairs, drops = clean(config, rows)
    dataset, names = _to_dataset(config, pairs)
    sizes = split_sizes(config, len(dataset))
    splits = split(dataset, sizes, seed, "label" if names is not None else None)
    splits.save_to_disk(str(folder))
    report = _report(config, len(rows), drops, splits, names)
    (folder / "report.json").write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return report


def _publish(work: Path, final: Path) -> None:
    """Move a finished folder into place in one step, so a crash never leaves half a cache entry."""
    try:
        os.replace(work, final)
    except OSError:  # another process published the same entry first: theirs is identical
        shutil.rmtree(work, ignore_errors=True)


def prepare(config: DataConfig, seed: int, cache_root: Path) -> PreparedData:
    """Read, clean and split config.path; cached in cache_root/data/<hash of file, config and seed>."""
    seed = config.seed if config.seed is not None else seed
    if not Path(config.path).is_file():
        read_rows(config)  # raises the file-not-found DataError
    final = Path(cache_root) / "data" / _prepare_key(config, seed)
    if not (final / "report.json").is_file():
        work = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        _build(config, seed, work)
        _publish(work, final)
    report = DataReport(**json.loads((final / "report.json").read_text(encoding="utf-8")))
    return PreparedData(folder=final, report=report, label_names=report.label_names)


def _tokenizer_identity(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        # A call with truncation/padding rewrites these in the backend; they are per-call settings, not identity.
        state.pop("truncation", None), state.pop("padding", None)
        vocab = json.dumps(state, sort_keys=True)
    else:
        vocab = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    parts = [type(tokenizer).__name__, str(tokenizer.name_or_path), str(len(tokenizer)), str(tokenizer.eos_token),
             str(tokenizer.truncation_side), hashlib.sha256(vocab.encode()).hexdigest()]
    return "|".join(parts)


def _tokenize_key(prepared: PreparedData, tokenizer: Any, task: Task, max_seq_len: int) -> str:
    text = "\n".join([CACHE_VERSION, prepared.folder.name, _tokenizer_identity(tokenizer), Task(task).value, str(max_seq_len)])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _classification_fn(tokenizer: Any, max_seq_len: int):
    def encode(batch: dict[str, list]) -> dict[str, list]:
        out = tokenizer(batch["text"], truncation=True, max_length=max_seq_len)
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"], "labels": batch["label"]}

    return encode


def _causal_fn(tokenizer: Any, max_seq_len: int):
    if tokenizer.eos_token is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path} has no eos token; causal_lm needs one to end each response")

    def encode(batch: dict[str, list]) -> dict[str, list]:
        starts = [len(p) + 1 for p in batch["prompt"]]  # the response begins after prompt + "\n"
        texts = [p + "\n" + r + tokenizer.eos_token for p, r in zip(batch["prompt"], batch["response"])]
        out = tokenizer(texts, truncation=True, max_length=max_seq_len, return_offsets_mapping=True)
        labels = []
        for ids, offsets, start in zip(out["input_ids"], out["offset_mapping"], starts):
            # Loss only on the response: a token that begins inside the prompt (or a special token at 0) is masked.
            labels.append([tok if begin >= start else -100 for tok, (begin, _) in zip(ids, offsets)])
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"], "labels": labels}

    return encode


def _tokenize_splits(prepared: PreparedData, tokenizer: Any, task: Task, max_seq_len: int, key: str) -> "DatasetDict":
    from datasets import DatasetDict

    splits = load_tokenized(prepared.folder)
    fn = _classification_fn(tokenizer, max_seq_len) if task == Task.classification else _causal_fn(tokenizer, max_seq_len)
    out = {}
    for name, part in splits.items():
        # keep_in_memory: never write cache files into the prepared folder; the fingerprint is our own key,
        # so datasets does not try to hash the tokenizer.
        mapped = part.map(fn, batched=True, remove_columns=part.column_names, keep_in_memory=True,
                          new_fingerprint=f"{key}-{name}")
        if task == Task.causal_lm:
            kept = mapped.filter(lambda row: any(x != -100 for x in row["labels"]), keep_in_memory=True, new_fingerprint=f"{key}-{name}-kept")
            if len(kept) < len(mapped):
                log.warning("%s: %d of %d rows dropped: max_seq_len %d leaves no response token",
                            name, len(mapped) - len(kept), len(mapped), max_seq_len)
            mapped = kept
        out[name] = mapped
    return DatasetDict(out)


def tokenize(prepared: PreparedData, tokenizer: Any, task: Task, max_seq_len: int, cache_root: Path) -> Path:
    """Tokenized splits (no padding; truncated to max_seq_len) in cache_root/tokenized/<hash>; returns that folder."""
    key = _tokenize_key(prepared, tokenizer, task, max_seq_len)
    final = Path(cache_root) / "tokenized" / key
    if not (final / "dataset_dict.json").is_file():
        work = final.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        _tokenize_splits(prepared, tokenizer, Task(task), max_seq_len, key).save_to_disk(str(work))
        _publish(work, final)
    return final


def load_tokenized(folder: Path) -> "DatasetDict":
    """The DatasetDict saved in `folder` (memory-mapped Arrow)."""
    from datasets import load_from_disk

    return load_from_disk(str(folder))


def collator(tokenizer: Any, task: Task):
    """Pads each batch to its longest row; causal_lm labels are padded with -100 so padding carries no loss."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding

    if tokenizer.pad_token is None:
        raise ValueError("the tokenizer has no pad token; load it with finesweep.trainer.models.load_tokenizer (pads with eos)")
    if Task(task) == Task.classification:
        return DataCollatorWithPadding(tokenizer)
    return DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
