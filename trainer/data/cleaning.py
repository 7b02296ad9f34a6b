"""Cleaning rules: each one configurable in DataConfig and each counted, with a few examples, in the report.

Rows are reduced to (text, label) pairs (with data.text_pair_column, the text is the row's two texts as a JSON list,
so every rule compares the pair whole), or for causal_lm (conversation before the last reply, last reply)
pairs (the conversation, read from any of chat_formats.py's formats, kept as JSON text), as they stream in;
duplicate and conflict rules keep 16-byte digests rather than the texts, so a million rows cost little beyond the
pairs themselves.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from finesweep.spaces.config import DataConfig, Task
from finesweep.trainer.data import chat, chat_formats
from finesweep.trainer.data.readers import (
    EXAMPLE_CHARS, DataError, Row, Source, cell_text, closest_column_hint, label_text,
)

EXAMPLES_KEPT = 3
# More than this share of rows in labels too rare to split: the label column holds values, not classes.
MOST_ROWS_RARE = 0.5
# More distinct labels than this, all numbers and some with fractions, are a measurement: classes named by numbers with
# fractions are the steps of a rating scale (0.5 to 5.0 in halves: 10).
MAX_FRACTIONAL_CLASSES = 20
EMPTY = "(empty)"
TEXT_PAIR = "text_pair"  # a prepared split's column of the pairs' second texts (the tokenizer's argument's name)
Pair = tuple[str, str]


def normalise(text: str) -> str:
    """Unicode NFKC, case folded, runs of whitespace collapsed: 'Caf\u00e9  GOOD' and 'caf\u00e9 good' compare equal."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_key(config: DataConfig, text: str) -> bytes:
    """The digest texts are compared by (normalised unless data.normalize is off)."""
    return hashlib.blake2b((normalise(text) if config.normalize else text).encode(), digest_size=16).digest()


def text_pair(first: str, second: str) -> str:
    """A row's two texts (data.text_pair_column) as the one text the rules compare: a JSON list, which no text
    can be confused with and which keeps either text whole (no separator to escape)."""
    return json.dumps([first, second], ensure_ascii=False)


def split_text_pair(text: str) -> tuple[str, str]:
    first, second = json.loads(text)
    return first, second


def _readable_pair(text: str) -> str:
    """A text pair as its two texts; any other text (one that only starts like a JSON list) as it is."""
    try:
        parts = json.loads(text)
    except ValueError:
        return text
    is_pair = isinstance(parts, list) and len(parts) == 2 and all(isinstance(part, str) for part in parts)
    return " | ".join(parts) if is_pair else text


def _example(pair: Pair) -> str:
    first = pair[0]
    if first.startswith("[{"):  # a conversation (causal_lm): shown as turns, not as JSON
        first = chat.readable(chat.from_cell(first))
    elif first.startswith('["'):
        first = _readable_pair(first)
    text = " | ".join(part for part in (first, pair[1]) if part) or EMPTY
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


class Drops:
    """Counts and a few examples of dropped rows, per rule."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, rule: str, pair: Pair) -> None:
        self.counts[rule] = self.counts.get(rule, 0) + 1
        kept = self.examples.setdefault(rule, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(_example(pair))


def check_columns(config: DataConfig, source: Source, row: Row) -> None:
    """A classification file's text (and text pair) and label columns (causal_lm's are chat_formats.detect's)."""
    present = list(row)
    wanted = [("text", config.text_column), ("text_pair", config.text_pair_column), ("label", config.label_column)]
    for key, column in ((key, column) for key, column in wanted if column is not None):
        if column not in present:
            raise DataError(
                f"{source.name}: no column '{column}' (data.{key}_column); the file has columns {present}. "
                f"{_fix_for_missing(config, row, key, column)}"
            )


def _fix_for_missing(config: DataConfig, row: Row, key: str, column: str) -> str:
    """A chat file read as a classifier's (data.task left at its default) needs the task, not a column name."""
    fmt = chat_formats.fitting(config, row)
    if fmt is not None:
        return (f"Its columns are those of chat data ({fmt}): to fine-tune a language model on the conversations, "
                f"set data.task: causal_lm in the sweep file; for a classifier, set data.{key}_column to the right "
                "name.")
    return f"{closest_column_hint(column, list(row))}Set data.{key}_column in the sweep file to the right name."


class _LabelTypes:
    """Refuses a label column mixing value types (1 and "positive"; 1 and "1"; 1 and 1.0).

    Turning them all into strings would silently make "1" and 1 two classes, or merge two labelling schemes:
    there is no safe guess, so the user decides. CSV/TSV cells are all strings, so this concerns JSON and Parquet.
    """

    def __init__(self, source: Source, column: str) -> None:
        self.source, self.column = source, column
        self.first: dict[str, tuple[int, Any]] = {}

    def check(self, position: int, value: Any) -> None:
        if isinstance(value, (list, dict)):
            raise _not_one_label(self.source, self.column, position, value)
        kind = type(value).__name__
        if value is None or kind in self.first:
            return
        self.first[kind] = (position, value)
        if len(self.first) > 1:
            seen = "; ".join(f"{k} {v!r} at {self.source.where(p)}" for k, (p, v) in self.first.items())
            raise DataError(
                f"{self.source.name}: column '{self.column}' mixes label types ({seen}). Labels of different types are "
                "ambiguous (is 1 the same class as \"1\" or \"positive\"?), so finesweep does not guess. "
                "Fix: write every label in one type, e.g. all strings, or map the numbers to their names."
            )


def _not_one_label(source: Source, column: str, position: int, value: Any) -> DataError:
    """A list (or mapping) where a label should be: multi-label data, which a single-label classifier would learn as
    one class per combination of labels without saying so."""
    shown = repr(value)
    return DataError(
        f"{source.name}: column '{column}' (data.label_column) holds a {type(value).__name__} at "
        f"{source.where(position)} ({shown[:EXAMPLE_CHARS]}): labels as lists are multi-label data, but finesweep trains "
        "single-label classifiers (one class a row). Fix: give each row its one label as a plain value (a one-item "
        "list as its item), or, to learn each combination as a class of its own, join the list into one string "
        "(e.g. 'sports+politics')."
    )


class Read(NamedTuple):
    """What read_pairs got from one source."""

    pairs: list[Pair]
    rows_in: int
    chat_format: str | None  # causal_lm: the format the rows were read as (chat_formats.FORMATS)


def read_pairs(config: DataConfig, source: Source, rows: Iterable[tuple[int, Row]], drops: Drops) -> Read:
    """The non-empty pairs with an allowed label, the number of rows read, and (causal_lm) their chat format."""
    second = config.label_column
    types = _LabelTypes(source, second) if config.task == Task.classification else None
    allowed = _allowed_spellings(config)
    pairs: list[Pair] = []
    rows_in, fmt, to_conversation = 0, None, None
    for position, row in rows:
        if rows_in == 0 and config.task == Task.causal_lm:
            fmt = chat_formats.detect(config, source, row)
            to_conversation = chat_formats.reader(config, fmt)
        elif rows_in == 0:
            check_columns(config, source, row)
        rows_in += 1
        if types is not None:
            types.check(position, row.get(second))
        if to_conversation is not None:
            pair = _conversation_pair(to_conversation(row, f"{source.name}: {source.where(position)}"))
        else:
            pair = (_input_text(config, row), label_text(row.get(second)))
        if not (pair[0] and pair[1]):
            # The example shows which part was empty (of a text pair, which text).
            drops.add("empty", (pair[0] or _shown_input(config, row), pair[1] or EMPTY))
        elif allowed is not None and _label_key(config, pair[1]) not in allowed:
            drops.add("label_not_allowed", pair)
        else:
            pairs.append(pair if allowed is None else (pair[0], allowed[_label_key(config, pair[1])]))
    return Read(pairs, rows_in, fmt)


def _input_text(config: DataConfig, row: Row) -> str:
    """A classifier's input: the text column's cell, or with data.text_pair_column both texts (empty where either
    is, so the empty rule drops the row)."""
    first = cell_text(row.get(config.text_column))
    if config.text_pair_column is None:
        return first
    second = cell_text(row.get(config.text_pair_column))
    return text_pair(first, second) if first and second else ""


def _shown_input(config: DataConfig, row: Row) -> str:
    """An empty input as the report's example shows it: EMPTY, or a text pair's two texts with the empty one so."""
    if config.text_pair_column is None:  # (set only for a classifier: DataConfig checks)
        return EMPTY
    texts = (cell_text(row.get(config.text_column)), cell_text(row.get(config.text_pair_column)))
    return " | ".join(text or EMPTY for text in texts)


def _label_key(config: DataConfig, label: str) -> str:
    return normalise(label) if config.normalize else label


def _allowed_spellings(config: DataConfig) -> dict[str, str] | None:
    """data.allowed_labels by the key a label is compared with: a row's 'Positive' is the allowed 'positive'."""
    if not config.allowed_labels:
        return None
    return {_label_key(config, label): label for label in config.allowed_labels}


def merge_label_spellings(config: DataConfig, parts: dict[str | None, list[Pair]]) -> dict[str, dict[str, Any]]:
    """Labels equal after data.normalize's folding ('Positive', 'positive', 'POSITIVE') are one class, named by its
    most frequent spelling (the file's first among equals): each spelling as its own class would split the class and
    teach the model to tell case apart. Rewrites `parts` in place (every split alike) and returns what was merged:
    {spelling: {"class": the class's name, "rows": rows so spelt}}."""
    if config.task != Task.classification or not config.normalize:
        return {}
    counts = Counter(label for pairs in parts.values() for _, label in pairs)
    spellings: dict[str, list[str]] = {}
    for label, _ in counts.most_common():
        spellings.setdefault(normalise(label), []).append(label)
    rename = {other: found[0] for found in spellings.values() for other in found[1:]}
    if rename:
        for name, pairs in parts.items():
            parts[name] = [(text, rename.get(label, label)) for text, label in pairs]
    return {other: {"class": name, "rows": counts[other]} for other, name in rename.items()}


def _conversation_pair(messages: list[chat.Message]) -> Pair:
    """(the conversation before its last reply as JSON, the last reply); empty parts stay empty for the empty rule."""
    context, reply = messages[:-1], messages[-1]["content"]
    has_question = any(m["content"] for m in context if m["role"] == "user")
    return (chat.to_cell(context) if has_question else "", reply)


def clean(config: DataConfig, pairs: list[Pair], drops: Drops) -> list[Pair]:
    """Pairs left after the conflicting-label and duplicate rules (in that order)."""
    classification = config.task == Task.classification
    if classification and config.drop_conflicts:
        # Before dropping duplicates: dedupe keeps the first label and would hide the conflict.
        pairs = _drop_conflicts(config, pairs, drops)
    if config.drop_duplicates:
        pairs = list(_drop_duplicates(config, pairs, drops, by_text=classification))
    return pairs


def _drop_conflicts(config: DataConfig, pairs: list[Pair], drops: Drops) -> list[Pair]:
    label_of: dict[bytes, str] = {}
    torn: set[bytes] = set()
    keys = [text_key(config, text) for text, _ in pairs]
    for key, (_, label) in zip(keys, pairs):
        if label_of.setdefault(key, label) != label:
            torn.add(key)
    kept = []
    for key, pair in zip(keys, pairs):
        if key in torn:  # no way to know which label is right: keep none of them
            drops.add("conflicting_labels", pair)
        else:
            kept.append(pair)
    return kept


def _drop_duplicates(config: DataConfig, pairs: list[Pair], drops: Drops, by_text: bool) -> Iterator[Pair]:
    exact: set[bytes] = set()
    near: set[bytes] = set()
    for pair in pairs:
        parts = pair[:1] if by_text else pair
        exact_key = hashlib.blake2b("\0".join(parts).encode(), digest_size=16).digest()
        near_key = hashlib.blake2b("\0".join(map(normalise, parts)).encode(), digest_size=16).digest()
        if exact_key in exact:
            drops.add("duplicate", pair)
        elif config.normalize and near_key in near:
            drops.add("near_duplicate", pair)  # equal only after NFKC, case folding and whitespace collapsing
        else:
            exact.add(exact_key)
            near.add(near_key)
            yield pair


def drop_rare_classes(config: DataConfig, pairs: list[Pair], drops: Drops, splits: int = 3) -> list[Pair]:
    """Without one row per split a class cannot be stratified, and would be missing from some split. A label column
    of values is refused first, whether or not the rule is on (as for pre-split files): turned off, a score column
    became 356 classes of 600 rows."""
    if config.task != Task.classification:
        return pairs
    counts = Counter(label for _, label in pairs)
    refuse_values_as_labels(config, counts, splits)
    if not config.drop_rare_classes:
        return pairs
    rare = {label for label, n in counts.items() if n < splits}
    if not rare:
        return pairs
    kept = []
    for pair in pairs:
        if pair[1] in rare:
            drops.add("rare_class", pair)
        else:
            kept.append(pair)
    return kept


def refuse_values_as_labels(config: DataConfig, counts: Counter[str], splits: int = 3) -> None:
    """DataError where the label column holds values (a score, a price, an id, free text), not classes: most rows
    carry a label too few rows share to be split, or the labels are more numbers with fractions than a rating scale
    has steps. A classifier would learn each value as a class, on what the rare-class rule left of the file: a score of
    0.0 to 5.0 in two decimals lost 390 of 600 rows that way; a confidence column (2,291 values from 0.26 to 1) kept
    hundreds of classes."""
    rows = sum(counts.values())
    rare = [label for label, n in counts.items() if n < splits]
    rare_rows = sum(counts[label] for label in rare)
    numbers = [float(label) for label in counts if _is_number(label)]
    numeric = len(numbers) == len(counts)
    fractional = numeric and len(numbers) > MAX_FRACTIONAL_CLASSES and any(not n.is_integer() for n in numbers)
    if rows == 0 or not (fractional or rare_rows > MOST_ROWS_RARE * rows):
        return
    examples = ", ".join(repr(label[:EXAMPLE_CHARS]) for label in (rare or list(counts))[:EXAMPLES_KEPT])
    unsplittable = (f"{rare_rows:,} of the rows ({100 * rare_rows / rows:.0f}%) carry a value that fewer than {splits} "
                    f"rows share, so no split could hold each of them")
    if numeric:
        found = (f"numbers from {min(numbers):g} to {max(numbers):g} (e.g. {examples}): a score or a measurement, a "
                 f"regression target, not class labels; {unsplittable}")
        fix = ("finesweep trains classifiers and causal LMs, not regression: bin the values into classes (say low, "
               "medium, high) in a column of their own and point data.label_column at it")
    else:
        found = f"labels that are free text or identifiers (e.g. {examples}), not classes: {unsplittable}"
        fix = "point data.label_column at the column that holds the classes"
    raise DataError(f"{config.path}: column '{config.label_column}' (data.label_column) holds {len(counts):,} distinct "
                    f"values over {rows:,} rows, {found}. Fix: {fix}.")


def _is_number(label: str) -> bool:
    try:
        return math.isfinite(float(label))
    except ValueError:
        return False
