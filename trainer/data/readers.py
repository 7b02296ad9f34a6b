"""Reading data files faithfully and as a stream: CSV/TSV/JSONL/JSON/Parquet and datasets folders, with clear errors.

Every reader yields (position, row) one row at a time, so a million-row file never sits in memory as dicts;
the position (a line number for text files, a row number otherwise) lets later rules name the offending row.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLE_CHARS = 80
ENCODING_FIX = "set data.encoding: latin-1 (or cp1252) in the sweep file"
BY_SUFFIX = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
BATCH_ROWS = 10_000
SPREADSHEET_SUFFIXES = (".xlsx", ".xls", ".xlsm", ".ods", ".numbers")
csv.field_size_limit(1 << 30)  # long documents are legitimate inputs, not a reason to fail

Row = dict[str, Any]


def cell_text(value: Any) -> str:
    """A cell as stripped text; None (a missing value) is empty."""
    return "" if value is None else str(value).strip()


def label_text(value: Any) -> str:
    """A label cell as text. A whole float reads as its integer ("1", not "1.0"): an integer column with a missing
    value comes out of Parquet and pandas-written JSON as floats, and its classes should keep the names the same
    labels have in a CSV (and in the exported model's id2label)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return cell_text(value)


class DataError(ValueError):
    """User-facing: one paragraph naming the file, the column or line, the rule, what was found, and the fix."""


def closest_column_hint(column: str, present: list[str]) -> str:
    """"Did you mean 'x'? " for the file's column nearest a missing one's name; empty where none is near."""
    close = difflib.get_close_matches(column, present, n=1, cutoff=0.4)
    return f"Did you mean '{close[0]}'? " if close else ""


@dataclass(frozen=True)
class Source:
    """One file (or one split of a datasets folder) to read, and how."""

    path: Path
    fmt: str
    split: str | None = None  # the split inside a datasets DatasetDict folder

    @property
    def name(self) -> str:
        return f"{self.path} [{self.split}]" if self.split else str(self.path)

    def where(self, position: int) -> str:
        """'line 12' in a text file, 'row 12' in Parquet or a datasets folder."""
        return f"{'row' if self.fmt in ('parquet', 'datasets') else 'line'} {position}"


def detect_format(setting: str, path: Path) -> str:
    """The configured format, or the one the extension (or a save_to_disk folder) tells."""
    if not path.exists():
        raise DataError(f"{path}: no such file. Check data.path in the sweep file (a relative path is relative to the sweep file).")
    if path.is_dir():
        if any((path / marker).is_file() for marker in ("dataset_dict.json", "state.json")):
            return "datasets"
        raise DataError(
            f"{path}: a folder, but not one written by datasets' save_to_disk (no dataset_dict.json or state.json in it). "
            "Point data.path at a data file, or at a folder saved with Dataset.save_to_disk / DatasetDict.save_to_disk."
        )
    if setting not in ("auto", "datasets"):
        return setting
    fmt = BY_SUFFIX.get(path.suffix.lower())
    if path.suffix.lower() in SPREADSHEET_SUFFIXES:
        raise DataError(
            f"{path}: a spreadsheet ('{path.suffix}'), which finesweep does not read (a workbook's sheets, formulas and "
            "formatting have no one reading as rows). Fix: save the sheet as CSV (in Excel: File > Save As > CSV UTF-8; "
            "in LibreOffice: File > Save As > Text CSV) and point data.path at that file."
        )
    if fmt is None:
        raise DataError(
            f"{path}: cannot tell the file format from the extension '{path.suffix}'; the known extensions are "
            f"{', '.join(BY_SUFFIX)}. Rename the file or set data.format (csv, tsv, jsonl or parquet) in the sweep file."
        )
    return fmt


def codec(encoding: str) -> str:
    """utf-8 also reads a file that starts with a byte order mark (Excel writes one)."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise DataError(f"data.encoding '{encoding}' is not a text encoding Python knows; use e.g. utf-8, latin-1 or cp1252.") from None
    return "utf-8-sig" if name == "utf-8" else name


def decode_error(path: Path, encoding: str) -> DataError:
    """Where the first undecodable byte is. Only on the error path, so reading the whole file here is fine."""
    raw = path.read_bytes()
    try:
        raw.decode(codec(encoding))
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        return DataError(
            f"{path}: line {line} (byte offset {err.start}) holds byte 0x{raw[err.start]:02x}, which is not valid "
            f"{encoding}: the file is in another text encoding. Fix: {ENCODING_FIX}."
        )
    return DataError(f"{path}: cannot be decoded as {encoding}. Fix: {ENCODING_FIX}.")


def iter_rows(source: Source, encoding: str) -> Iterator[tuple[int, Row]]:
    """Every row of the source, in file order, with its line (or row) number."""
    if source.fmt == "parquet":
        yield from _parquet(source.path)
    elif source.fmt == "datasets":
        yield from _datasets(source)
    else:
        try:
            yield from _text_rows(source.path, source.fmt, encoding)
        except UnicodeDecodeError:
            raise decode_error(source.path, encoding) from None


# Text files never hold a NUL byte (in the 8-bit encodings and utf-8 that data files use); binary ones almost always
# do within their first few kilobytes (git's own test for "binary").
BINARY_PROBE_BYTES = 8192


def check_text(path: Path, fmt: str) -> None:
    """A binary file (a spreadsheet, an archive, a Parquet file named .csv) is said to be one, instead of being read
    as text into garbage column names."""
    with path.open("rb") as handle:
        head = handle.read(BINARY_PROBE_BYTES)
    if b"\x00" in head:
        raise DataError(
            f"{path}: this is not a text file (it holds NUL bytes), so it cannot be read as {fmt.upper()}. If it is a "
            "spreadsheet, export it as CSV; if it is Parquet, name it .parquet or set data.format: parquet; a "
            "compressed file must be decompressed first."
        )


def _text_rows(path: Path, fmt: str, encoding: str) -> Iterator[tuple[int, Row]]:
    check_text(path, fmt)
    if fmt == "jsonl" and path.suffix.lower() == ".json" and _starts_with_bracket(path, encoding):
        yield from _json_array(path, encoding)
        return
    # newline="": quoted fields keep their \r and \n exactly as written; JSONL lines end at \n only.
    with path.open("r", encoding=codec(encoding), newline="" if fmt != "jsonl" else "\n") as handle:
        if fmt == "jsonl":
            yield from _jsonl(path, handle)
        else:
            yield from _delimited(path, handle, "\t" if fmt == "tsv" else ",")


def _delimited(path: Path, handle: io.TextIOBase, delimiter: str) -> Iterator[tuple[int, Row]]:
    # strict: a broken quote is an error at its line, not the rest of the file swallowed into one field.
    reader = csv.reader(handle, delimiter=delimiter, strict=True)
    start = 1
    try:
        header = [h.strip() for h in next(reader, [])]
        if not any(header):
            raise DataError(f"{path}: the file is empty; it needs a header line naming the columns, then one row per example.")
        start = reader.line_num + 1
        for record in reader:
            if record:  # a short row leaves its last columns empty (then dropped as empty), as pandas would
                yield start, dict(zip(header, record))
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(
            f"{path}: the record starting at line {start} is not valid CSV ({err}): a quote is not closed, or text follows "
            "a closing quote. Quote fields holding the delimiter, quotes or line breaks, and double the quotes inside them."
        ) from None


def _jsonl(path: Path, handle: io.TextIOBase) -> Iterator[tuple[int, Row]]:
    for number, line in enumerate(handle, start=1):
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
        yield number, row


def _starts_with_bracket(path: Path, encoding: str) -> bool:
    with path.open("r", encoding=codec(encoding)) as handle:
        head = handle.read(4096)
    return head.lstrip().startswith("[")


def _json_array(path: Path, encoding: str) -> Iterator[tuple[int, Row]]:
    try:
        rows = json.loads(path.read_text(encoding=codec(encoding)))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno} is not valid JSON ({err.msg}); fix the file or write it as JSONL.") from None
    if not all(isinstance(r, dict) for r in rows):
        raise DataError(f"{path}: a JSON file must be a list of objects (one per example); found other values in the list.")
    yield from enumerate(rows, start=1)


def _parquet(path: Path) -> Iterator[tuple[int, Row]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(
            f"{path}: not a readable Parquet file ({err}). Check that the file really is Parquet (it may be CSV or JSON "
            "renamed), or set data.format (csv, tsv, jsonl) in the sweep file."
        ) from None
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            yield number, row


def _datasets(source: Source) -> Iterator[tuple[int, Row]]:
    dataset = load_saved(source.path)
    if source.split is not None:
        dataset = dataset[source.split]
    number = 0
    for batch in dataset.iter(batch_size=BATCH_ROWS):
        columns = list(batch)
        for values in zip(*(batch[c] for c in columns)):
            number += 1
            yield number, dict(zip(columns, values))


def load_saved(path: Path):
    """A Dataset or DatasetDict written by save_to_disk (memory-mapped)."""
    from datasets import load_from_disk

    return load_from_disk(str(path))


def saved_splits(path: Path) -> list[str] | None:
    """The split names of a DatasetDict folder; None for a single Dataset folder."""
    marker = path / "dataset_dict.json"
    return json.loads(marker.read_text(encoding="utf-8"))["splits"] if marker.is_file() else None
