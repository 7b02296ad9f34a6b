"""Chat data: conversations read from messages or prompt/response(/system) columns (ShareGPT and Alpaca files:
test_chat_formats.py), rendered with the model's chat template or as plain text, the loss on the assistant turns only
(checked token by token), and the clear errors."""

from __future__ import annotations

import json

import pytest

from finesweep.spaces import Task
from finesweep.spaces.config import DataConfig
from finesweep.trainer import data
from finesweep.trainer.data import chat
from finesweep.trainer.data.readers import DataError
from tests import tiny

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "colour of the sky?"},
    {"role": "assistant", "content": "blue"},
    {"role": "user", "content": "and grass?"},
    {"role": "assistant", "content": "green"},
]


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny.build_tiny_chat_lm(tmp_path_factory.mktemp("tiny-chat-lm")))


def _config(path, **fields) -> DataConfig:
    return DataConfig(path=str(path), task="causal_lm", splits={"train": 0.6, "validation": 0.2, "test": 0.2}, **fields)


def _labelled_runs(tokenizer, ids: list[int], labels: list[int]) -> tuple[list[str], list[str]]:
    """The decoded runs of trained tokens and of masked tokens, in order."""
    trained, masked, run, in_trained = [], [], [], None
    for token, label in zip(ids, labels):
        now = label != -100
        if now != in_trained and run:
            (trained if in_trained else masked).append(tokenizer.decode(run))
            run = []
        if now:
            assert label == token  # a trained position predicts its own token
        run.append(token)
        in_trained = now
    (trained if in_trained else masked).append(tokenizer.decode(run))
    return trained, masked


def test_plain_rendering_is_prompt_newline_response_eos_with_the_reply_as_the_only_span():
    class Tokenizer:
        eos_token = "<eos>"

    text, spans = chat.render(CONVERSATION, Tokenizer(), None)
    assert text == "Be brief.\ncolour of the sky?\nblue<eos>and grass?\ngreen<eos>"
    assert [text[a:b] for a, b in spans] == ["blue<eos>", "green<eos>"]
    assert chat.render_prompt(CONVERSATION[:2], Tokenizer(), None) == "Be brief.\ncolour of the sky?\n"


def test_the_chat_template_renders_and_only_assistant_tokens_are_trained(chat_tokenizer, tmp_path):
    path = tiny.write_jsonl(tmp_path / "chats.jsonl", [{"messages": CONVERSATION}] * 1 + [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]} for i in range(9)])
    prepared = data.prepare(_config(path, drop_leaked=False), 0, tmp_path / "cache")
    template = chat.resolve_template("auto", chat_tokenizer, "chat")
    assert template == tiny.CHATML_TEMPLATE
    folder = data.tokenize(prepared, chat_tokenizer, Task.causal_lm, 128, tmp_path / "cache", chat_template=template)
    rows = [row for part in data.load_tokenized(folder).values() for row in part]
    row = next(r for r in rows if "sky" in chat_tokenizer.decode(r["input_ids"]))
    assert chat_tokenizer.decode(row["input_ids"]) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ncolour of the sky?<|im_end|>\n"
        "<|im_start|>assistant\nblue<|im_end|>\n<|im_start|>user\nand grass?<|im_end|>\n<|im_start|>assistant\ngreen<|im_end|>\n")
    trained, masked = _labelled_runs(chat_tokenizer, row["input_ids"], row["labels"])
    assert trained == ["blue<|im_end|>\n", "green<|im_end|>\n"]  # the replies and their end-of-turn, nothing else
    assert masked == ["<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ncolour of the sky?<|im_end|>\n<|im_start|>assistant\n",
                      "<|im_start|>user\nand grass?<|im_end|>\n<|im_start|>assistant\n"]
    assert json.loads((folder / data.tokenizing.SUMMARY_FILE).read_text())["chat_template"] == "template"


def test_plain_text_is_used_when_asked_and_is_keyed_apart_in_the_cache(chat_tokenizer, tmp_path):
    path = tiny.write_jsonl(tmp_path / "chats.jsonl", tiny.conversation_rows(20))
    prepared = data.prepare(_config(path), 0, tmp_path / "cache")
    plain = data.tokenize(prepared, chat_tokenizer, Task.causal_lm, 128, tmp_path / "cache", chat_template=None)
    templated = data.tokenize(prepared, chat_tokenizer, Task.causal_lm, 128, tmp_path / "cache",
                              chat_template=tiny.CHATML_TEMPLATE)
    assert plain != templated
    row = data.load_tokenized(plain)["train"][0]
    assert "<|im_start|>" not in chat_tokenizer.decode(row["input_ids"])
    trained, _ = _labelled_runs(chat_tokenizer, row["input_ids"], row["labels"])
    assert trained and all(run.endswith("<|im_end|>") for run in trained)  # plain replies end with the eos token


def test_prompt_response_and_system_columns_make_a_conversation(tmp_path):
    rows = [{"prompt": f"q{i}", "response": f"a{i}", "sys": "Be brief."} for i in range(10)]
    path = tiny.write_csv(tmp_path / "d.csv", rows)
    prepared = data.prepare(_config(path, system_column="sys"), 0, tmp_path / "cache")
    first = json.loads(data.load_tokenized(prepared.folder)["train"][0]["messages"])
    assert [m["role"] for m in first] == ["system", "user", "assistant"] and first[0]["content"] == "Be brief."


def test_a_messages_column_in_a_csv_is_read_as_json(tmp_path):
    rows = [{"messages": json.dumps([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}])}
            for i in range(10)]
    prepared = data.prepare(_config(tiny.write_csv(tmp_path / "d.csv", rows)), 0, tmp_path / "cache")
    assert sum(prepared.report.splits.values()) == 10


def test_turns_after_the_last_reply_are_left_out():
    messages = chat.conversation_from_cell(CONVERSATION + [{"role": "user", "content": "bye"}], "line 1", "messages")
    assert messages == CONVERSATION


@pytest.mark.parametrize("messages, message", [
    ([{"role": "human", "content": "hi"}, {"role": "gpt", "content": "yo"}],
     r"line 3: message 0 of column 'messages' has role 'human'; finesweep reads the roles system, user, assistant"),
    ([{"role": "user", "content": "hi"}],
     r"line 3: a conversation with no assistant turn \(roles \['user'\]\).*add the reply"),
    ([{"role": "user", "text": "hi"}], r"line 3: message 0 of column 'messages' is .* not an object with `role` and `content`"),
    ("not a list", r"line 3: column 'messages' is not a JSON list of messages"),
])
def test_bad_conversations_are_clear_errors_naming_the_line(tmp_path, messages, message):
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = tiny.write_jsonl(tmp_path / "chats.jsonl", [good, good, {"messages": messages}])
    with pytest.raises(DataError, match=message):
        data.prepare(_config(path), 0, tmp_path / "cache")


def test_a_file_with_neither_prompt_nor_messages_names_both(tmp_path):
    path = tiny.write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a"}] * 4)
    with pytest.raises(DataError, match=r"no chat format fits the columns \['question', 'answer'\].*'messages' "
                                        r"\(data.messages_column\).*'prompt' \(data.prompt_column\)"):
        data.prepare(_config(path), 0, tmp_path / "cache")


def test_template_settings_and_their_errors(chat_tokenizer, tiny_causal_lm, tmp_path):
    from transformers import AutoTokenizer

    no_template = AutoTokenizer.from_pretrained(tiny_causal_lm)
    assert chat.resolve_template("auto", no_template, "gpt") is None  # plain where the model has none
    assert chat.resolve_template("none", chat_tokenizer, "chat") is None
    with pytest.raises(DataError, match="data.chat_template: model, but the tokenizer of model 'gpt' has no chat template"):
        chat.resolve_template("model", no_template, "gpt")
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for message in messages %}{{ message['role'] }")
    with pytest.raises(DataError, match="data.chat_template: the chat template for model 'chat' does not render"):
        chat.resolve_template(str(broken), chat_tokenizer, "chat")
    unstable = tmp_path / "unstable.jinja"  # writes the number of turns first: each prefix renders differently
    unstable.write_text("{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(DataError, match="renders a conversation differently from its first turns"):
        chat.resolve_template(str(unstable), chat_tokenizer, "chat")
    good = tmp_path / "plain.jinja"
    good.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                    "{% if add_generation_prompt %}assistant: {% endif %}")
    assert chat.resolve_template(str(good), no_template, "gpt") == good.read_text()


def test_the_prompt_for_generation_ends_where_the_assistant_turn_begins(chat_tokenizer):
    prompt = chat.render_prompt(CONVERSATION[:2], chat_tokenizer, tiny.CHATML_TEMPLATE)
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ncolour of the sky?<|im_end|>\n<|im_start|>assistant\n"
    text, spans = chat.render(CONVERSATION[:3], chat_tokenizer, tiny.CHATML_TEMPLATE)
    assert text.startswith(prompt) and spans == [(len(prompt), len(text))]
