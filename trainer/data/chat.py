"""Conversations for causal_lm: read from rows, rendered as text with the loss on the assistant turns only.

Every causal_lm example is a conversation, a list of {role, content} messages (system, user, assistant):
a `messages` cell as OpenAI's chat format writes it, or a ShareGPT cell, Alpaca's or prompt/response columns
turned into one (chat_formats.py reads each). It is rendered either with a chat template (the model's own, or a
Jinja file) or as plain text, and `render` returns the character spans of the assistant turns, which tokenizing
turns into the label mask: the model learns to answer, not to write the questions.

Plain text is the format finesweep used before chat templates: each message's content on its own line and
each assistant reply ended by the tokenizer's end-of-sequence token ("prompt\\nresponse<eos>" for one turn).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from finesweep.spaces.config import CHAT_TEMPLATE_SETTINGS
from finesweep.trainer.data.readers import DataError

ROLES = ("system", "user", "assistant")
ASSISTANT = "assistant"
MESSAGES = "messages"  # the prepared causal_lm splits' one column: each row a conversation as JSON text
AUTO, MODEL, NONE = CHAT_TEMPLATE_SETTINGS  # data.chat_template values that name no file

Message = dict[str, str]
Span = tuple[int, int]


def conversation_from_cell(value: Any, where: str, column: str,
                           roles: Mapping[str, str] | None = None) -> list[Message]:
    """A `messages` cell (a list of {role, content}, or its JSON text as CSV holds it) as a checked conversation.

    roles: further role names (lower case) and the role each is (data.roles); messages after the last assistant
    turn are left out."""
    items = list_from_cell(value, where, column, "[{\"role\": \"user\", \"content\": ...}, "
                           "{\"role\": \"assistant\", \"content\": ...}] (OpenAI's chat format)")
    return through_last_reply([_message(item, where, column, i, roles or {}) for i, item in enumerate(items)], where)


def list_from_cell(value: Any, where: str, column: str, shape: str) -> list[Any]:
    """A cell holding a list of turns, or its JSON text (CSV holds only text); shape: how a conversation is written."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise DataError(f"{where}: column '{column}' is not a JSON list of messages ({error.msg}): "
                            f"{value[:80]!r}. Write each conversation as {shape}.") from None
    if not isinstance(value, list):
        raise DataError(f"{where}: column '{column}' holds {type(value).__name__}, not a list of messages. Write each "
                        f"conversation as {shape}.")
    return value


def through_last_reply(messages: list[Message], where: str) -> list[Message]:
    """The conversation up to its last assistant turn: later turns would carry no loss, only tokens."""
    last = max((i for i, m in enumerate(messages) if m["role"] == ASSISTANT), default=None)
    if last is None:
        roles = [m["role"] for m in messages]
        raise DataError(f"{where}: a conversation with no assistant turn (roles {roles}); the loss is on the assistant's "
                        "replies, so there is nothing to learn from it. Fix: add the reply as an assistant turn, or "
                        "remove the row.")
    return messages[: last + 1]


def _message(item: Any, where: str, column: str, index: int, roles: Mapping[str, str]) -> Message:
    if not isinstance(item, dict) or "role" not in item or "content" not in item:
        raise DataError(f"{where}: message {index} of column '{column}' is {str(item)[:80]!r}, not an object with "
                        "`role` and `content`. Write each message as {\"role\": ..., \"content\": ...}.")
    role = roles.get(str(item["role"]).lower(), item["role"])
    if role not in ROLES:
        raise DataError(f"{where}: message {index} of column '{column}' has role {role!r}; finesweep reads the roles "
                        f"{', '.join(ROLES)} (OpenAI's chat format). Fix: rename the role, or say what it is in the "
                        f"sweep file, e.g. data.roles: {{{role}: user}} (user, assistant or system).")
    return message(role, item["content"])


def message(role: str, content: Any) -> Message:
    """One turn, its content as stripped text (None, a missing value, is empty)."""
    return {"role": role, "content": "" if content is None else str(content).strip()}


def conversation_from_columns(prompt: str, response: str, system: str | None) -> list[Message]:
    """prompt/response columns (and an optional system column) as a one-turn conversation."""
    system_turn = [{"role": "system", "content": system}] if system else []
    return [*system_turn, {"role": "user", "content": prompt}, {"role": ASSISTANT, "content": response}]


def readable(messages: Sequence[Message]) -> str:
    """'user: ... / assistant: ...' for the data report's examples of dropped rows."""
    return " / ".join(f"{m['role']}: {m['content']}" for m in messages)


def template_setting_is_file(setting: str) -> bool:
    return setting not in CHAT_TEMPLATE_SETTINGS


def resolve_template(setting: str, tokenizer: Any, model_name: str) -> str | None:
    """The Jinja template conversations are rendered with, or None for plain text (see module doc)."""
    if setting == NONE:
        return None
    if template_setting_is_file(setting):
        template = _read_template(Path(setting))
    else:
        template = own_template(tokenizer)
        if template is None and setting == MODEL:
            raise DataError(f"data.chat_template: model, but the tokenizer of model '{model_name}' has no chat template "
                            "(no chat_template in its tokenizer_config.json or chat_template.jinja). Fix: set "
                            "data.chat_template to auto (plain text where a model has none), none, or a Jinja file.")
    if template is not None:
        _check_renders(template, tokenizer, model_name)
    return template


def own_template(tokenizer: Any) -> str | None:
    """The tokenizer's chat template; of several named ones, the default."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or None


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"data.chat_template: cannot read the template file {path} ({error}). Give a UTF-8 Jinja file, "
                        "or auto, model or none.") from None


def _check_renders(template: str, tokenizer: Any, model_name: str) -> None:
    """A template that fails on a plain two-turn conversation fails on every row: say so once, up front."""
    sample = conversation_from_columns("Hello?", "Hi.", None)
    try:
        render(sample, tokenizer, template)
    except DataError:
        raise
    except Exception as error:  # jinja2's TemplateError and whatever the template raises itself
        raise DataError(f"data.chat_template: the chat template for model '{model_name}' does not render a plain "
                        f"user/assistant conversation: {type(error).__name__}: {error}. Fix the template, or set "
                        "data.chat_template: none (plain text).") from None


def render(messages: Sequence[Message], tokenizer: Any, template: str | None) -> tuple[str, list[Span]]:
    """The conversation as one text and the character spans of its assistant turns (the trained part)."""
    if template is None:
        return _render_plain(messages, tokenizer.eos_token)
    return _render_template(messages, tokenizer, template)


def render_prompt(messages: Sequence[Message], tokenizer: Any, template: str | None) -> str:
    """What the model is given to write the next assistant turn: the same format it was trained on."""
    if template is None:
        return "".join(m["content"] + "\n" for m in messages)
    return tokenizer.apply_chat_template(list(messages), chat_template=template, tokenize=False,
                                         add_generation_prompt=True)


def _render_plain(messages: Sequence[Message], eos: str) -> tuple[str, list[Span]]:
    text, spans = "", []
    for message in messages:
        if message["role"] == ASSISTANT:
            piece = message["content"] + eos
            spans.append((len(text), len(text) + len(piece)))
        else:
            piece = message["content"] + "\n"
        text += piece
    return text, spans


def _render_template(messages: Sequence[Message], tokenizer: Any, template: str) -> tuple[str, list[Span]]:
    """Render the whole conversation, and for each assistant turn the conversation up to it with the generation
    prompt and up to its end: the turn is the text between the two. This needs no {% generation %} markers in
    the template (few templates have them), only that rendering is prefix-stable, which is checked."""

    def text_of(part: Sequence[Message], prompt: bool) -> str:
        return tokenizer.apply_chat_template(list(part), chat_template=template, tokenize=False,
                                             add_generation_prompt=prompt)

    full = text_of(messages, False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != ASSISTANT:
            continue
        before = text_of(messages[:i], True) if i else ""  # a template may not render an empty conversation
        through = text_of(messages[: i + 1], False)
        if not (through.startswith(before) and full.startswith(through)):
            raise DataError("data.chat_template: the chat template renders a conversation differently from its first "
                            f"turns (turn {i} changes what came before it), so finesweep cannot tell which tokens are "
                            "the assistant's. Fix: use a template whose output for the first n turns is a prefix of "
                            "its output for the whole conversation, or set data.chat_template: none.")
        spans.append((len(before), len(through)))
    return full, spans


def to_cell(messages: Sequence[Message]) -> str:
    """How a conversation is kept in a prepared split (Arrow holds the JSON text; compact, order kept)."""
    return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":"))


def from_cell(cell: str) -> list[Message]:
    return json.loads(cell)
