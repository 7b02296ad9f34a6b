"""The Ollama Modelfile of a GGUF export: its TEMPLATE, read back from the Modelfile's text and run over `.Messages` as
Ollama runs it, writes every conversation exactly as the tokenizer's own chat template does (ChatML; SmolLM2's with
its default system message; a template that writes the beginning-of-sequence text first). ollama itself is not
installed here: the template is run by the small interpreter below, which knows the actions the Modelfile uses and
fails on any other."""

from __future__ import annotations

import re

import pytest

from finesweep.trainer.serving.ollama import chat_blocks, modelfile
from tests.tiny import CHATML_TEMPLATE, build_tiny_chat_lm

# SmolLM2-135M-Instruct's template, as its GGUF file carries it: ChatML with a default system message.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# A Zephyr-like format that opens every conversation with the beginning-of-sequence text.
BOS_FIRST_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + "
    "eos_token + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "What colour is the sky?"}],
    [{"role": "system", "content": "You name colours."}, {"role": "user", "content": "sky?"}],
    [{"role": "user", "content": "sky?"}, {"role": "assistant", "content": "blue"}, {"role": "user", "content": "grass?"}],
    [{"role": "system", "content": "Be brief {{ really }}."}, {"role": "user", "content": "a\nb"},
     {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
]


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_chat_lm(tmp_path_factory.mktemp("chat")))


def modelfile_directives(text: str) -> dict[str, str]:
    """TEMPLATE and SYSTEM (triple-quoted) of a Modelfile's text, and its stops joined by '|'."""
    found = {name: value for name, value in re.findall(r'^(TEMPLATE|SYSTEM) """(.*?)"""', text, re.S | re.M)}
    found["stop"] = "|".join(re.findall(r'^PARAMETER stop "(.*)"$', text, re.M))
    return found


def run_go_template(template: str, messages: list[dict[str, str]]) -> str:
    """Go's text/template for the actions a finesweep Modelfile uses: range .Messages, if / else if eq .Role "x",
    .Content, end, and a quoted string; no trim markers. Anything else fails the test."""
    tokens = re.split(r"({{.*?}})", template, flags=re.S)
    out, position = [], 0

    def block(index: int, message: dict[str, str] | None, emit: bool) -> int:
        """Runs tokens from `index` until an `end`/`else` of this level; returns the index of that token."""
        while index < len(tokens):
            token = tokens[index]
            if not token.startswith("{{"):
                out.append(token) if emit else None
                index += 1
                continue
            action = token[2:-2].strip()
            if action in ("end",) or action.startswith("else"):
                return index
            if action == "range .Messages":
                for each in messages:
                    end = block(index + 1, each, emit)
                end = block(index + 1, None, False) if not messages else end
                index = end + 1
            elif (match := re.fullmatch(r'if eq \.Role "(\w+)"', action)):
                taken = False
                cursor = index
                condition = emit and message is not None and message["role"] == match.group(1)
                while True:
                    cursor = block(cursor + 1, message, condition and not taken)
                    taken = taken or condition
                    closing = tokens[cursor][2:-2].strip()
                    if closing == "end":
                        break
                    branch = re.fullmatch(r'else if eq \.Role "(\w+)"', closing)
                    assert branch, f"unknown action {closing!r}"
                    condition = emit and message is not None and message["role"] == branch.group(1)
                index = cursor + 1
            elif action == ".Content":
                out.append(message["content"]) if emit else None
                index += 1
            elif (literal := re.fullmatch(r'"(.*)"', action)):
                out.append(literal.group(1)) if emit else None
                index += 1
            else:
                raise AssertionError(f"unknown action {action!r}")
        return index

    position = block(0, None, True)
    assert position == len(tokens), f"unbalanced template: stopped at {tokens[position]!r}"
    return "".join(out)


def ollama_prompt(directives: dict[str, str], messages: list[dict[str, str]]) -> str:
    """What Ollama's chat endpoint renders: the Modelfile's SYSTEM first where the conversation has no system turn."""
    if "SYSTEM" in directives and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": directives["SYSTEM"]}] + messages
    return run_go_template(directives["TEMPLATE"], messages)


@pytest.mark.parametrize("template", [CHATML_TEMPLATE, SMOLLM2_TEMPLATE, BOS_FIRST_TEMPLATE],
                         ids=["chatml", "smollm2", "bos-first"])
def test_the_modelfile_writes_each_conversation_as_the_chat_template_does(chat_tokenizer, template):
    chat_tokenizer.chat_template = template
    directives = modelfile_directives(modelfile(chat_tokenizer, ["<|im_end|>"]))
    for messages in CONVERSATIONS:
        expected = chat_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ollama_prompt(directives, messages) == expected
    assert directives["stop"] == "<|im_end|>"
    assert ("SYSTEM" in directives) == (template == SMOLLM2_TEMPLATE)


def test_a_template_that_is_not_role_blocks_gets_no_template(chat_tokenizer):
    # What it writes before a user's turn depends on the turn's position: no prefix per role describes it.
    chat_tokenizer.chat_template = ("{% for m in messages %}{{ loop.index|string + ':' + m['content'] + ';' }}"
                                    "{% endfor %}")
    assert chat_blocks(chat_tokenizer) is None
    text = modelfile(chat_tokenizer, ["<|im_end|>"])
    assert text.startswith("FROM ./model.gguf\n") and "TEMPLATE" not in text and "not one of role blocks" in text


def test_plain_text_models_are_prompted_with_raw_text(chat_tokenizer):
    chat_tokenizer.chat_template = None
    assert modelfile_directives(modelfile(chat_tokenizer, ["<|im_end|>"]))["TEMPLATE"] == "{{ .Prompt }}"
