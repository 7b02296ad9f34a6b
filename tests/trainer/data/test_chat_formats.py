"""Chat data in the formats users have: ShareGPT and Alpaca files give exactly the tokens and loss masks of their
OpenAI `messages` twin, the format is told from the columns (or set), the report names it, and unknown roles or
missing columns are clear errors."""

from __future__ import annotations

import json

import pytest

from finesweep.spaces import Task
from finesweep.spaces.config import DataConfig
from finesweep.trainer import data
from finesweep.trainer.data import chat_formats
from finesweep.trainer.data.readers import DataError
from tests import tiny

SHAREGPT_NAMES = {"system": "system", "user": "human", "assistant": "gpt"}


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.build_tiny_chat_lm(tmp_path_factory.mktemp("tiny-chat-lm")))


def _config(path, **fields) -> DataConfig:
    return DataConfig(path=str(path), task="causal_lm", splits={"train": 0.6, "validation": 0.2, "test": 0.2}, **fields)


def _tokens(path, tokenizer, cache, **fields) -> tuple[dict[str, list[tuple[list[int], list[int]]]], data.DataReport]:
    """Each split's (input ids, labels), rendered with the ChatML template, and the data report."""
    prepared = data.prepare(_config(path, **fields), 0, cache)
    folder = data.tokenize(prepared, tokenizer, Task.causal_lm, 128, cache, chat_template=tiny.CHATML_TEMPLATE)
    parts = data.load_tokenized(folder).items()
    splits = {name: [(row["input_ids"], row["labels"]) for row in part] for name, part in parts}
    return splits, prepared.report


def _sharegpt(messages: list[dict], names: dict[str, str] = SHAREGPT_NAMES) -> list[dict]:
    return [{"from": names[m["role"]], "value": m["content"]} for m in messages]


def _alpaca_rows(n: int) -> list[dict]:
    """Instructions with an input on most rows (none on every third), as Alpaca files have them."""
    return [{"instruction": f"name the colour of item {i}", "input": "" if i % 3 == 0 else f"item {i} is red",
             "output": f"red {i}"} for i in range(n)]


def test_a_sharegpt_file_gives_the_tokens_and_masks_of_its_messages_twin(chat_tokenizer, tmp_path):
    conversations = [row["messages"] for row in tiny.conversation_rows(20)]
    # ShareGPT files spell roles many ways: the aliases and their capitals all read as the same roles
    names = [SHAREGPT_NAMES, {"system": "system", "user": "user", "assistant": "assistant"},
             {"system": "System", "user": "Human", "assistant": "GPT"},
             {"system": "system", "user": "human", "assistant": "chatgpt"}]
    shared = tiny.write_jsonl(tmp_path / "sharegpt.jsonl", [{"conversations": _sharegpt(m, names[i % len(names)])}
                                                            for i, m in enumerate(conversations)])
    twin = tiny.write_jsonl(tmp_path / "messages.jsonl", [{"messages": m} for m in conversations])
    got, report = _tokens(shared, chat_tokenizer, tmp_path / "cache")
    want, _ = _tokens(twin, chat_tokenizer, tmp_path / "cache")
    assert got == want and sum(len(rows) for rows in got.values()) == 20
    assert report.chat_format == "sharegpt" and "  chat format: sharegpt" in report.render()


def test_an_alpaca_file_gives_the_tokens_and_masks_of_its_messages_twin(chat_tokenizer, tmp_path):
    """A non-empty input follows the instruction after a blank line; an empty one adds nothing."""
    rows = _alpaca_rows(20)
    alpaca = tiny.write_jsonl(tmp_path / "alpaca.jsonl", rows)
    twin = tiny.write_jsonl(tmp_path / "messages.jsonl", [{"messages": [
        {"role": "user", "content": f"{r['instruction']}\n\n{r['input']}" if r["input"] else r["instruction"]},
        {"role": "assistant", "content": r["output"]}]} for r in rows])
    got, report = _tokens(alpaca, chat_tokenizer, tmp_path / "cache")
    want, _ = _tokens(twin, chat_tokenizer, tmp_path / "cache")
    assert got == want and report.chat_format == "alpaca"
    decoded = [chat_tokenizer.decode(ids) for part in got.values() for ids, _ in part]
    assert any("<|im_start|>user\nname the colour of item 1\n\nitem 1 is red<|im_end|>" in text for text in decoded)


def test_alpaca_joins_a_non_empty_input_and_never_drops_it():
    assert chat_formats.from_alpaca("Translate.", "bonjour", "hello")[0]["content"] == "Translate.\n\nbonjour"
    assert chat_formats.from_alpaca("Translate.", "", "hello")[0]["content"] == "Translate."
    assert chat_formats.from_alpaca("", "bonjour", "hello")[0]["content"] == "bonjour"


@pytest.mark.parametrize("rows, expected", [
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "prompt": "x"}],
     "messages"),
    ([{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "id": "7"}], "sharegpt"),
    ([{"instruction": "q", "input": "", "output": "a", "prompt": "x", "response": "y"}], "alpaca"),
    ([{"prompt": "q", "response": "a"}], "prompt_response"),
])
def test_auto_detection_picks_the_format_from_the_columns(tmp_path, rows, expected):
    path = tiny.write_jsonl(tmp_path / "d.jsonl", [{**rows[0], "tag": str(i)} for i in range(10)])
    report = data.prepare(_config(path, drop_duplicates=False, drop_leaked=False), 0, tmp_path / "cache").report
    assert report.chat_format == expected and f"chat format: {expected}" in report.render()


def test_chat_format_overrides_the_detection(tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"m{i}"}, {"role": "assistant", "content": "a"}],
             "conversations": [{"from": "human", "value": f"s{i}"}, {"from": "gpt", "value": "b"}]} for i in range(10)]
    path = tiny.write_jsonl(tmp_path / "both.jsonl", rows)
    auto = data.prepare(_config(path), 0, tmp_path / "cache")
    chosen = data.prepare(_config(path, chat_format="sharegpt"), 0, tmp_path / "cache")
    assert (auto.report.chat_format, chosen.report.chat_format) == ("messages", "sharegpt")
    texts = [row["messages"] for row in data.load_tokenized(chosen.folder)["train"]]
    assert all('"s' in text and '"m' not in text for text in texts)
    with pytest.raises(DataError, match=r"no column 'instruction' \(data.instruction_column\), which the alpaca chat "
                                        r"format reads; the file has columns \['messages', 'conversations'\]"):
        data.prepare(_config(path, chat_format="alpaca"), 0, tmp_path / "cache")


def test_an_unknown_sharegpt_role_is_a_clear_error_and_data_roles_maps_it(tmp_path):
    good = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    odd = {"conversations": [{"from": "human", "value": "q"}, {"from": "narrator", "value": "meanwhile"},
                             {"from": "gpt", "value": "a"}]}
    path = tiny.write_jsonl(tmp_path / "d.jsonl", [good, odd] + [
        {"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}]} for i in range(8)])
    with pytest.raises(DataError, match=r"d.jsonl: line 2: turn 1 of column 'conversations' is from 'narrator', a role "
                                        r"finesweep does not know .*Fix: .*data.roles: \{narrator: user\}"):
        data.prepare(_config(path), 0, tmp_path / "cache")
    prepared = data.prepare(_config(path, roles={"Narrator": "system"}), 0, tmp_path / "cache")
    assert sum(prepared.report.splits.values()) == 10


def test_tool_turns_follow_llama_factory_the_call_is_the_assistant_s_the_result_the_user_s():
    turns = [{"from": "human", "value": "weather?"}, {"from": "function_call", "value": "{\"name\": \"w\"}"},
             {"from": "observation", "value": "sunny"}, {"from": "gpt", "value": "It is sunny."}]
    messages = chat_formats.from_sharegpt(turns, "line 1", "conversations", chat_formats.SHAREGPT_ROLES)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    with pytest.raises(DataError, match=r"is from 'function', a role finesweep does not know"):
        chat_formats.from_sharegpt([{"from": "function", "value": "x"}], "line 1", "conversations",
                                   chat_formats.SHAREGPT_ROLES)


def test_a_file_of_no_chat_format_names_every_format_s_columns(tmp_path):
    path = tiny.write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a"}] * 4)
    with pytest.raises(DataError, match=r"no chat format fits the columns \['question', 'answer'\].*messages: "
                                        r"'messages' \(data.messages_column\); sharegpt: 'conversations'.*alpaca: "
                                        r"'instruction' \(data.instruction_column\) and 'output'.*prompt_response: "
                                        r"'prompt' \(data.prompt_column\) and 'response'"):
        data.prepare(_config(path), 0, tmp_path / "cache")


def test_a_renamed_input_column_that_is_missing_is_an_error_not_dropped_inputs(tmp_path):
    path = tiny.write_jsonl(tmp_path / "d.jsonl", _alpaca_rows(6))
    with pytest.raises(DataError, match=r"no column 'context' \(data.input_column\), which the alpaca chat format "
                                        r"reads; the file has columns \['instruction', 'input', 'output'\]"):
        data.prepare(_config(path, input_column="context"), 0, tmp_path / "cache")


def test_a_system_column_beside_sharegpt_turns_is_the_first_turn(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}],
             "system": "Be brief."} for i in range(10)]
    prepared = data.prepare(_config(tiny.write_jsonl(tmp_path / "d.jsonl", rows), system_column="system"), 0,
                            tmp_path / "cache")
    first = json.loads(data.load_tokenized(prepared.folder)["train"][0]["messages"])
    assert [m["role"] for m in first] == ["system", "user", "assistant"] and first[0]["content"] == "Be brief."


def test_pre_split_files_may_differ_in_format_and_the_report_names_each(tmp_path):
    def rows(n: int, start: int) -> list[dict]:
        return [[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
                for i in range(start, start + n)]

    tiny.write_jsonl(tmp_path / "tr.jsonl", [{"conversations": _sharegpt(m)} for m in rows(6, 0)])
    tiny.write_jsonl(tmp_path / "va.jsonl", [{"messages": m} for m in rows(3, 10)])
    tiny.write_jsonl(tmp_path / "te.jsonl", [{"messages": m} for m in rows(3, 20)])
    config = DataConfig(path=str(tmp_path / "tr.jsonl"), validation_path="va.jsonl", test_path="te.jsonl",
                        task="causal_lm")
    report = data.prepare(config, 0, tmp_path / "cache").report
    assert report.chat_format == "train=sharegpt, validation=messages, test=messages"
