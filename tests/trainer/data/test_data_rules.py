"""trainer.data: normalised cleaning rules, pre-split input, leakage, too-long rows, tokenizer checks, report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from finesweep.spaces import DataConfig, ModelCandidate, SweepConfig, Task
from finesweep.trainer import data
from finesweep.trainer.data import DataError, prepare
from tests import tiny

FRACTIONS = {"train": 0.5, "validation": 0.25, "test": 0.25}


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def _base(n: int = 20) -> list[list[str]]:
    return [["text", "label"]] + [[f"text {i}", "pos" if i % 2 else "neg"] for i in range(n)]


def _texts(prepared, split: str) -> list[str]:
    return data.load_tokenized(prepared.folder)[split]["text"]


# ---------------------------------------------------------------- cleaning rules


def test_near_duplicates_and_conflicts_after_normalisation(tmp_path):
    rows = _base() + [["TEXT  1", "pos"], ["\uff54ext 3", "pos"]]      # case + whitespace; fullwidth t (NFKC)
    rows += [["Torn apart", "pos"], ["torn   APART", "neg"]]          # a conflict only after normalising
    path = _write(tmp_path / "d.csv", rows)
    report = prepare(DataConfig(path=str(path), splits=FRACTIONS), 0, tmp_path).report
    assert report.dropped == {"conflicting_labels": 2, "near_duplicate": 2}
    assert report.dropped_examples["near_duplicate"] == ["TEXT  1 | pos", "\uff54ext 3 | pos"]
    assert sum(report.splits.values()) == 20
    exact = prepare(DataConfig(path=str(path), splits=FRACTIONS, normalize=False), 0, tmp_path).report
    assert exact.dropped == {}  # without normalising, every row is distinct


def test_conflicts_kept_when_turned_off(tmp_path):
    path = _write(tmp_path / "d.csv", _base() + [["torn", "pos"], ["torn", "neg"]])
    report = prepare(DataConfig(path=str(path), splits=FRACTIONS, drop_conflicts=False), 0, tmp_path).report
    assert report.dropped == {"duplicate": 1}  # the second "torn" is then a plain duplicate of the first


def test_labels_outside_allowed_set_are_dropped(tmp_path):
    path = _write(tmp_path / "d.csv", _base() + [["odd one", "spam"], ["odd two", "spam"], ["odd three", "?"]])
    report = prepare(DataConfig(path=str(path), splits=FRACTIONS, allowed_labels=["neg", "pos"]), 0, tmp_path).report
    assert report.dropped == {"label_not_allowed": 3}
    assert report.label_names == ["neg", "pos"]
    with pytest.raises(DataError, match=r"1 distinct label.*label_not_allowed"):
        prepare(DataConfig(path=str(path), splits=FRACTIONS, allowed_labels=["neg", "nothing"]), 0, tmp_path)


def test_classes_too_small_to_split_are_dropped(tmp_path):
    path = _write(tmp_path / "d.csv", _base() + [["rare one", "rare"], ["rare two", "rare"]])
    report = prepare(DataConfig(path=str(path), splits=FRACTIONS), 0, tmp_path).report
    assert report.dropped == {"rare_class": 2}
    assert report.label_names == ["neg", "pos"]
    kept = prepare(DataConfig(path=str(path), splits=FRACTIONS, drop_rare_classes=False), 0, tmp_path).report
    assert kept.label_names == ["neg", "pos", "rare"] and "rare_class" not in kept.dropped


def test_label_spellings_equal_after_folding_are_one_class(tmp_path):
    labels = ["pos", "neg"] * 10 + ["Pos", "NEG", "Neg"]
    rows = _labelled(labels) + [["torn", "pos"], ["torn", "Pos"]]  # one label in two spellings: no conflict
    path = _write(tmp_path / "d.csv", rows)
    report = prepare(DataConfig(path=str(path), splits=FRACTIONS), 0, tmp_path).report
    assert report.label_names == ["neg", "pos"]
    assert report.merged_labels == {"Pos": {"class": "pos", "rows": 2}, "NEG": {"class": "neg", "rows": 1},
                                    "Neg": {"class": "neg", "rows": 1}}
    assert report.dropped == {"duplicate": 1}, "the second 'torn' is a duplicate, not a conflict"
    assert "labels merged (the same after data.normalize's folding of case, spaces and Unicode forms): 'Pos' -> " \
           "'pos' (2 rows), 'NEG' -> 'neg' (1 row)" in report.render()
    apart = prepare(DataConfig(path=str(path), splits=FRACTIONS, normalize=False, drop_rare_classes=False), 0,
                    tmp_path).report
    assert apart.label_names == ["NEG", "Neg", "Pos", "neg", "pos"] and apart.merged_labels == {}
    allowed = prepare(DataConfig(path=str(path), splits=FRACTIONS, allowed_labels=["POS", "neg"]), 0, tmp_path).report
    assert allowed.label_names == ["POS", "neg"] and "label_not_allowed" not in allowed.dropped, "named as allowed"


def test_a_spelling_only_one_pre_split_file_has_joins_the_class(tmp_path):
    _write(tmp_path / "train.csv", _labelled(["pos", "neg"] * 10))
    _write(tmp_path / "val.csv", _labelled(["pos", "neg"] * 3))
    _write(tmp_path / "test.csv", [["text", "label"]] + [[f"other {i}", "POS" if i % 2 else "neg"] for i in range(6)])
    config = DataConfig(path=str(tmp_path / "train.csv"), validation_path="val.csv", test_path="test.csv")
    report = prepare(config, 0, tmp_path).report
    assert report.label_names == ["neg", "pos"] and report.label_counts["test"] == {"neg": 3, "pos": 3}


def _labelled(labels: list[str]) -> list[list[str]]:
    return [["text", "label"]] + [[f"text {i}", label] for i, label in enumerate(labels)]


def test_a_score_column_is_refused_as_a_regression_target(tmp_path):
    # Two decimals from 0 to 5: most values occur once or twice; the rare-class rule would have kept a third of the rows.
    scores = [f"{(i * 37 % 500) / 100:.2f}" for i in range(600)]
    path = _write(tmp_path / "d.csv", _labelled(scores))
    with pytest.raises(DataError, match=r"column 'label' \(data.label_column\) holds 500 distinct values over 600 rows, "
                                        r"numbers from 0 to 4.99 .*regression target.*bin the values into classes"):
        prepare(DataConfig(path=str(path), splits=FRACTIONS), 0, tmp_path)
    # With the rare-class rule off the column is still values, not 500 classes.
    with pytest.raises(DataError, match=r"holds 500 distinct values over 600 rows, numbers from 0 to 4.99"):
        prepare(DataConfig(path=str(path), splits=FRACTIONS, drop_rare_classes=False), 0, tmp_path)


def test_fractional_numbers_beyond_a_rating_scale_are_refused_even_when_each_is_common(tmp_path):
    # A confidence column: most rows 1, the others 30 fractions of 5 rows each; no row is rare.
    confidences = ["1"] * 300 + [f"0.{50 + i}" for i in range(30) for _ in range(5)]
    path = _write(tmp_path / "d.csv", _labelled(confidences))
    with pytest.raises(DataError, match=r"31 distinct values .*numbers from 0.5 to 1 .*regression target"):
        prepare(DataConfig(path=str(path), splits=FRACTIONS), 0, tmp_path)


def test_rating_steps_and_many_integer_classes_are_classes(tmp_path):
    half_stars = [f"{(1 + i % 10) / 2:.1f}" for i in range(100)]  # 0.5 to 5.0: ten classes named by fractions
    report = prepare(DataConfig(path=str(_write(tmp_path / "h.csv", _labelled(half_stars))), splits=FRACTIONS), 0,
                     tmp_path).report
    assert len(report.label_names) == 10 and report.dropped == {}
    intents = [str(i % 40) for i in range(200)]  # 40 intents by number, 5 rows each
    report = prepare(DataConfig(path=str(_write(tmp_path / "i.csv", _labelled(intents))), splits=FRACTIONS), 0,
                     tmp_path).report
    assert len(report.label_names) == 40 and report.dropped == {}


def test_a_free_text_label_column_is_refused(tmp_path):
    rows = _labelled([f"a comment about item {i}" for i in range(50)] + ["pos", "neg"] * 10)
    with pytest.raises(DataError, match=r"holds 52 distinct values over 70 rows, labels that are free text or "
                                        r"identifiers \(e.g. 'a comment about item 0', .*50 of the rows \(71%\).*"
                                        r"point data.label_column at the column that holds the classes"):
        prepare(DataConfig(path=str(_write(tmp_path / "d.csv", rows)), splits=FRACTIONS), 0, tmp_path)
    kept = prepare(DataConfig(path=str(_write(tmp_path / "k.csv", rows[:11] + rows[51:])), splits=FRACTIONS), 0,
                   tmp_path).report  # a few rare labels among classes: the rare-class rule drops them, as before
    assert kept.dropped == {"rare_class": 10} and kept.label_names == ["neg", "pos"]


def test_swapped_text_and_label_columns_are_named(tmp_path):
    rows = [["text", "label"]] + [["pos" if i % 2 else "neg", f"a review, number {i}"] for i in range(40)]
    with pytest.raises(DataError, match=r"0 distinct label\(s\).*if 'text' holds the classes, swap data.text_column "
                                        r"and data.label_column"):
        prepare(DataConfig(path=str(_write(tmp_path / "d.csv", rows)), splits=FRACTIONS), 0, tmp_path)


def test_pre_split_files_of_scores_are_refused(tmp_path):
    for name, start in (("train", 0), ("val", 400), ("test", 500)):
        _write(tmp_path / f"{name}.csv", _labelled([f"{(start + i) / 97:.3f}" for i in range(100 if start else 400)]))
    config = DataConfig(path=str(tmp_path / "train.csv"), validation_path="val.csv", test_path="test.csv")
    with pytest.raises(DataError, match=r"regression target"):
        prepare(config, 0, tmp_path)


def test_a_list_of_labels_is_refused_as_multi_label(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"text": f"t{i}", "label": "x"} for i in range(4)] + [{"text": "both", "label": ["x", "y"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"column 'label' \(data.label_column\) holds a list at line 5 \(\['x', 'y'\]\): "
                                        r"labels as lists are multi-label data.*join the list into one string"):
        prepare(DataConfig(path=str(path)), 0, tmp_path)


def test_mixed_type_labels_are_refused(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"text": f"t{i}", "label": i % 2} for i in range(10)] + [{"text": "x", "label": "positive"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"column 'label' mixes label types \(int 0 at line 1; str 'positive' at line 11\)"):
        prepare(DataConfig(path=str(path)), 0, tmp_path)


def test_integer_labels_alone_are_fine(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(20)), encoding="utf-8")
    assert prepare(DataConfig(path=str(path)), 0, tmp_path).report.label_names == ["0", "1"]


# ---------------------------------------------------------------- pre-split input and leakage


def _pre_split_files(tmp_path: Path) -> Path:
    _write(tmp_path / "val.csv", [["text", "label"]] + [[f"val {i}", "ab"[i % 2]] for i in range(6)])
    _write(tmp_path / "test.csv", [["text", "label"]] + [[f"test {i}", "ab"[i % 2]] for i in range(6)] + [["Shared Text", "a"]])
    train = [["text", "label"]] + [[f"train {i}", "ab"[i % 2]] for i in range(10)] + [["shared  text", "a"], ["VAL 1", "b"]]
    return _write(tmp_path / "train.csv", train)


def test_pre_split_files_are_used_as_they_are_and_leaks_leave_train(tmp_path):
    train = _pre_split_files(tmp_path)
    config = DataConfig(path=str(train), validation_path="val.csv", test_path=str(tmp_path / "test.csv"))
    prepared = prepare(config, 0, tmp_path / "cache")
    report = prepared.report
    assert report.pre_split and report.rows_in == 12 + 6 + 7
    assert report.splits == {"train": 10, "validation": 6, "test": 7}
    assert report.dropped == {"leaked_into_train": 2}
    assert sorted(report.dropped_examples["leaked_into_train"]) == ["VAL 1", "shared  text"]
    assert "shared  text" not in _texts(prepared, "train") and "Shared Text" in _texts(prepared, "test")
    assert "(pre-split)" in report.render()
    assert prepare(config.model_copy(update={"drop_leaked": False}), 0, tmp_path / "c2").report.splits["train"] == 12


@pytest.mark.parametrize(("fields", "pattern"), [
    ({"validation_path": "v.csv"}, r"needs both validation_path and test_path"),
    ({"validation_path": "v.csv", "test_path": "t.csv", "splits": {"train": 0.7, "validation": 0.15, "test": 0.15}},
     r"splits cannot be set with pre-split input"),
])
def test_pre_split_schema_is_validated(fields, pattern):
    with pytest.raises(ValidationError, match=pattern):
        DataConfig(path="train.csv", **fields)


def test_leak_found_when_duplicates_are_kept(tmp_path):
    rows = _base(40) + [[f"text {i}", "pos" if i % 2 else "neg"] for i in range(40)]  # every text twice
    path = _write(tmp_path / "d.csv", rows)
    report = prepare(DataConfig(path=str(path), drop_duplicates=False, splits=FRACTIONS), 0, tmp_path).report
    assert report.dropped["leaked_into_train"] > 0
    assert report.splits["train"] == 40 - report.dropped["leaked_into_train"]


def test_datasets_folders(tmp_path, sentiment_csv):
    from datasets import Dataset, DatasetDict

    rows = tiny.sentiment_rows(300)
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "one"))
    reference = prepare(DataConfig(path=str(sentiment_csv)), 0, tmp_path / "c0")
    single = prepare(DataConfig(path=str(tmp_path / "one")), 0, tmp_path / "c1")
    assert single.report.splits == reference.report.splits and not single.report.pre_split
    parts = DatasetDict(train=Dataset.from_list(rows[:200]), validation=Dataset.from_list(rows[200:250]),
                        test=Dataset.from_list(rows[250:]))
    parts.save_to_disk(str(tmp_path / "three"))
    three = prepare(DataConfig(path=str(tmp_path / "three")), 0, tmp_path / "c2").report
    assert three.pre_split and three.splits == {"train": 200, "validation": 50, "test": 50}
    DatasetDict(train=parts["train"], test=parts["test"]).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(DataError, match=r"splits \['train', 'test'\]"):
        prepare(DataConfig(path=str(tmp_path / "two")), 0, tmp_path / "c3")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match=r"not one written by datasets' save_to_disk"):
        prepare(DataConfig(path=str(tmp_path / "empty_dir")), 0, tmp_path / "c4")


# ---------------------------------------------------------------- tokenizing: too long, vocabulary, padding, report


def _classifier_tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("action", ["truncate", "drop"])
def test_too_long_rows_are_truncated_or_dropped_and_counted(sentiment_csv, tiny_classifier, tmp_path, action):
    tokenizer = _classifier_tokenizer(tiny_classifier)
    prepared = prepare(DataConfig(path=str(sentiment_csv)), 0, tmp_path)
    lengths = [len(tokenizer(t)["input_ids"]) for t in _texts(prepared, "train")]
    limit = max(lengths) - 1
    folder = data.tokenize(prepared, tokenizer, Task.classification, limit, tmp_path, too_long=action)
    train = data.load_tokenized(folder)["train"]
    entry = data.token_entry(tokenizer, {"p50": 1, "p95": 1, "p99": 1, "max": 1}, folder)
    over = sum(n > limit for n in lengths)
    assert over > 0 and entry["too_long"] >= over and entry["too_long_action"] == action
    assert len(train) == (len(lengths) - over if action == "drop" else len(lengths))
    assert max(len(ids) for ids in train["input_ids"]) <= limit


def test_tokenizer_that_does_not_match_its_model_is_named(sentiment_csv, tiny_classifier, tmp_path):
    tokenizer = _classifier_tokenizer(tiny_classifier)
    prepared = prepare(DataConfig(path=str(sentiment_csv)), 0, tmp_path)
    data.tokenize(prepared, tokenizer, Task.classification, 32, tmp_path, vocab_size=len(tokenizer), model_name="ok")
    with pytest.raises(DataError, match=r"model 'small-model': its tokenizer produces token id \d+ .* only 50 rows"):
        data.tokenize(prepared, tokenizer, Task.classification, 32, tmp_path, vocab_size=50, model_name="small-model")


def test_causal_tokenizer_without_pad_token_pads_with_eos_and_says_so(instructions_csv, tiny_causal_lm, tmp_path):
    from finesweep.trainer.models import load_tokenizer

    tokenizer = load_tokenizer(ModelCandidate(name="t", path=str(tiny_causal_lm)))
    assert tokenizer.pad_token == tokenizer.eos_token  # the tiny GPT-2 defines no pad token of its own
    prepared = prepare(DataConfig(path=str(instructions_csv), task="causal_lm"), 0, tmp_path)
    folder = data.tokenize(prepared, tokenizer, Task.causal_lm, 64, tmp_path)
    entry = data.token_entry(tokenizer, {"p50": 10, "p95": 12, "p99": 13, "max": 14}, folder)
    assert entry["pad_token"] == "eos"
    prepared.report.tokens = {"gpt": entry}
    assert "pads with its end-of-sequence token" in prepared.report.render()


def test_sweep_prepare_data_reports_lengths_and_saves_histogram(sentiment_csv, tiny_classifier, tmp_path):
    from rich.console import Console as RichConsole

    from finesweep.search.outputs.console import Console
    from finesweep.search.inputs import SweepFolder, prepare_data

    config = SweepConfig(name="t", data=DataConfig(path=str(sentiment_csv)), output_root=str(tmp_path),
                         models=[ModelCandidate(name="tiny", path=str(tiny_classifier))])
    console = Console(RichConsole(record=True, width=200))
    result = prepare_data(config, SweepFolder(tmp_path / "t"), console)
    plot = result.prepared.length_plot
    assert plot == result.prepared.folder / "lengths.png" and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    entry = result.prepared.report.tokens["tiny"]
    assert entry["max_seq_len"] == result.max_seq_len and entry["p99"] <= result.max_seq_len
    saved = json.loads((result.prepared.folder / "report.json").read_text(encoding="utf-8"))
    assert saved["tokens"]["tiny"] == entry
    assert "tiny tokens: p50" in console.out.export_text()
    again = prepare(config.data, config.seed, tmp_path / "t" / "cache")
    assert again.length_plot == plot and again.report.tokens == {"tiny": entry}


@pytest.mark.parametrize("header", [b"PK\x03\x04\x14\x00\x06\x00", b"PAR1\x15\x04\x15\x00"])  # xlsx (zip), Parquet
def test_a_binary_file_named_csv_is_said_to_be_one(tmp_path, header):
    path = tmp_path / "data.csv"
    path.write_bytes(header + bytes(range(256)) * 8)
    config = DataConfig(path=str(path), encoding="latin-1")  # latin-1 decodes any byte: only the NUL check can tell
    with pytest.raises(DataError, match=r"data.csv: this is not a text file \(it holds NUL bytes\).*CSV.*export it"):
        prepare(config, 0, tmp_path / "cache")


# ---------------------------------------------------------------- text pairs (data.text_pair_column)


def _pairs_file(tmp_path: Path, extra: list[list[str]]) -> Path:
    rows = [["premise", "hypothesis", "label"]]
    rows += [[f"a man plays {i}", f"someone plays {i}", "yes" if i % 2 else "no"] for i in range(20)]
    return _write(tmp_path / "pairs.csv", rows + extra)


def _pair_config(path: Path, **fields) -> DataConfig:
    return DataConfig(path=str(path), text_column="premise", text_pair_column="hypothesis", splits=FRACTIONS, **fields)


def test_text_pairs_are_compared_whole_by_the_cleaning_rules(tmp_path):
    """A pair repeats only where both texts do; its label conflicts only with the same pair's; either text empty
    is an empty row, and the report's example says which."""
    extra = [["a man plays 1", "someone plays 1", "yes"],           # the same pair again
             ["A MAN plays 3", "someone  PLAYS 3", "yes"],          # the same after normalising
             ["a man plays 1", "nobody plays", "no"],               # the same premise, another hypothesis: kept
             ["torn", "apart", "yes"], ["torn", "apart", "no"],     # one pair, two labels
             ["left alone", "", "yes"]]
    prepared = prepare(_pair_config(_pairs_file(tmp_path, extra)), 0, tmp_path)
    report = prepared.report
    assert report.dropped == {"duplicate": 1, "near_duplicate": 1, "conflicting_labels": 2, "empty": 1}
    assert report.dropped_examples["empty"] == ["left alone | (empty) | yes"]
    assert report.dropped_examples["conflicting_labels"] == ["torn | apart | yes", "torn | apart | no"]
    assert sum(report.splits.values()) == 21
    splits = data.load_tokenized(prepared.folder)
    assert splits["train"].column_names == ["text", "text_pair", "label"]
    rows = [(row["text"], row["text_pair"]) for part in splits.values() for row in part]
    assert ("a man plays 1", "nobody plays") in rows and ("a man plays 1", "someone plays 1") in rows


def test_text_pairs_are_tokenized_as_the_tokenizers_pair_with_segment_ids(tmp_path, tiny_classifier):
    from transformers import AutoTokenizer

    config = _pair_config(_pairs_file(tmp_path, []))
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    folder = data.tokenize(prepare(config, 0, tmp_path), tokenizer, Task.classification, 32, tmp_path)
    row = data.load_tokenized(folder)["train"][0]
    assert row["input_ids"].count(tokenizer.sep_token_id) == 2  # [CLS] first [SEP] second [SEP]
    second_starts = row["input_ids"].index(tokenizer.sep_token_id) + 1
    assert row["token_type_ids"] == [0] * second_starts + [1] * (len(row["input_ids"]) - second_starts)


def test_a_missing_pair_column_and_a_pair_column_where_none_belongs_are_named(tmp_path):
    path = _write(tmp_path / "d.csv", _base())
    with pytest.raises(DataError, match=r"no column 'hypothesis' \(data.text_pair_column\)"):
        prepare(DataConfig(path=str(path), text_pair_column="hypothesis", splits=FRACTIONS), 0, tmp_path)
    with pytest.raises(ValidationError, match="text_pair_column 'context' is for a classifier of text pairs"):
        DataConfig(path=str(path), task="causal_lm", text_pair_column="context")
    with pytest.raises(ValidationError, match="is also the text or the label column"):
        DataConfig(path=str(path), text_pair_column="label")


def test_a_tokenizer_that_joins_a_pair_with_nothing_between_is_refused(tmp_path, tiny_causal_lm):
    """GPT-2's tokenizer concatenates a pair as it is: the second text's start would be lost to the model."""
    from transformers import AutoTokenizer

    from finesweep.trainer.data.lengths import token_lengths

    prepared = prepare(_pair_config(_pairs_file(tmp_path, [])), 0, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    with pytest.raises(DataError, match="puts a text pair together with no token between the two texts"):
        token_lengths(prepared.folder, tokenizer, Task.classification)
    with pytest.raises(DataError, match="unset data.text_pair_column"):
        data.tokenize(prepared, tokenizer, Task.classification, 32, tmp_path)


def test_a_single_text_that_starts_like_a_json_list_is_shown_as_it_is(tmp_path):
    """Only a text pair is read back from its JSON list: a tweet opening with '["' is an example like any other."""
    rows = _base() + [['["quoted" she said', "pos"], ['["quoted" she said', "pos"]]
    report = prepare(DataConfig(path=str(_write(tmp_path / "d.csv", rows)), splits=FRACTIONS), 0, tmp_path).report
    assert report.dropped_examples["duplicate"] == ['["quoted" she said | pos']
