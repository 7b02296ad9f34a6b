"""The chat data formats users have, each read into the one conversation (a list of {role, content}) that cleaning,
splitting and tokenizing work on, so every later step is the same whatever the file looked like.

- messages: a column of OpenAI/TRL messages, [{"role": "user", "content": ...}, ...];
- sharegpt: a column of ShareGPT turns, [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}], the
  `from` names mapped by SHAREGPT_ROLES and data.roles;
- alpaca: instruction, optional input, and output columns; a non-empty input follows the instruction after a blank
  line ("{instruction}\\n\\n{input}", the order and spacing of Alpaca's own prompt template), never dropped;
- prompt_response: prompt and response columns.
The last three take an optional system column (data.system_column). data.chat_format: auto picks, from the first
row's columns, the first format of FORMATS whose columns are all there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from finesweep.spaces.config import DataConfig
from finesweep.trainer.data import chat
from finesweep.trainer.data.readers import DataError, Row, Source, cell_text, closest_column_hint

AUTO = "auto"
MESSAGES, SHAREGPT, ALPACA, PROMPT_RESPONSE = "messages", "sharegpt", "alpaca", "prompt_response"
FORMATS = (MESSAGES, SHAREGPT, ALPACA, PROMPT_RESPONSE)  # auto's order: the most specific columns first
ALPACA_JOIN = "\n\n"  # instruction, blank line, input: as Alpaca's template lays them out

# ShareGPT `from` names (lower case) and the role each is: Axolotl's sharegpt roles (human/user, gpt/assistant,
# system) and LLaMA-Factory's sharegpt tags, with the other names common in published ShareGPT files.
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "model": "assistant", "bot": "assistant", "chatgpt": "assistant",
    "system": "system",
    # Tool use as LLaMA-Factory lays it out: the call is the model's turn (so it is trained), the tool's result is
    # given to the model in the user's place (no loss). "function" is left out on purpose: some files mean the call
    # by it, OpenAI's old API meant the result; data.roles says which.
    "function_call": "assistant", "observation": "user", "tool": "user",
}
SHAREGPT_SHAPE = '[{"from": "human", "value": ...}, {"from": "gpt", "value": ...}] (ShareGPT)'

Reader = Callable[[Row, str], list[chat.Message]]  # a row and where it is (for errors) -> its conversation


def _needed(config: DataConfig, fmt: str) -> dict[str, str]:
    """The columns a format cannot do without, by the field that names each (data.<field>)."""
    return {
        MESSAGES: {"messages_column": config.messages_column},
        SHAREGPT: {"conversations_column": config.conversations_column},
        ALPACA: {"instruction_column": config.instruction_column, "output_column": config.output_column},
        PROMPT_RESPONSE: {"prompt_column": config.prompt_column, "response_column": config.response_column},
    }[fmt]


def _asked_for(config: DataConfig, fmt: str) -> dict[str, str]:
    """Optional columns the sweep file names, which must then be there."""
    asked = {"system_column": config.system_column} if config.system_column and fmt != MESSAGES else {}
    # A renamed input column that is missing would drop every input without a word; the default may be absent.
    if fmt == ALPACA and config.input_column != DataConfig.model_fields["input_column"].default:
        asked["input_column"] = config.input_column
    return asked


def detect(config: DataConfig, source: Source, row: Row) -> str:
    """The chat format of a causal_lm file: data.chat_format, or under auto the first one whose columns the first
    row has; its columns (and the optional ones the sweep file names) are checked here, once."""
    if config.chat_format == AUTO:
        fmt = fitting(config, row)
        if fmt is None:
            raise _no_format(config, source, row)
    else:
        fmt = config.chat_format
    for field, column in {**_needed(config, fmt), **_asked_for(config, fmt)}.items():
        if column not in row:
            raise _missing(source, row, fmt, field, column)
    return fmt


def fitting(config: DataConfig, row: Row) -> str | None:
    """The first chat format (FORMATS' order) whose columns the row has, or None."""
    return next((f for f in FORMATS if all(c in row for c in _needed(config, f).values())), None)


def _missing(source: Source, row: Row, fmt: str, field: str, column: str) -> DataError:
    present = list(row)
    hint = closest_column_hint(column, present)
    return DataError(f"{source.name}: no column '{column}' (data.{field}), which the {fmt} chat format reads; the file "
                     f"has columns {present}. {hint}Set data.{field} in the sweep file to the right name, or "
                     "data.chat_format to the format the file is in (auto tells it from the columns).")


def _no_format(config: DataConfig, source: Source, row: Row) -> DataError:
    options = "; ".join(f"{fmt}: " + " and ".join(f"'{c}' (data.{f})" for f, c in _needed(config, fmt).items())
                        for fmt in FORMATS)
    return DataError(f"{source.name}: no chat format fits the columns {list(row)}; causal_lm data has the columns of "
                     f"one of {options}. Fix: name the file's columns in the sweep file (e.g. data.prompt_column: "
                     "question and data.response_column: answer), or rename them in the file.")


def reader(config: DataConfig, fmt: str) -> Reader:
    """How each row of a file in `fmt` becomes a conversation (built once per file, used per row)."""
    extra = {name.lower(): role for name, role in config.roles.items()}
    if fmt == MESSAGES:
        return lambda row, where: chat.conversation_from_cell(row.get(config.messages_column), where,
                                                              config.messages_column, extra)
    if fmt == SHAREGPT:
        roles = {**SHAREGPT_ROLES, **extra}
        return lambda row, where: _with_system(config, row, where, from_sharegpt(
            row.get(config.conversations_column), where, config.conversations_column, roles))
    if fmt == ALPACA:
        return lambda row, where: _with_system(config, row, where, from_alpaca(
            cell_text(row.get(config.instruction_column)), cell_text(row.get(config.input_column)),
            cell_text(row.get(config.output_column))))
    return lambda row, where: _with_system(config, row, where, chat.conversation_from_columns(
        cell_text(row.get(config.prompt_column)), cell_text(row.get(config.response_column)), None))


def from_sharegpt(value: Any, where: str, column: str, roles: Mapping[str, str]) -> list[chat.Message]:
    """A ShareGPT cell (a list of {from, value}, or its JSON text) as a conversation; roles: lower-case `from` names
    and the role each is. Turns after the last assistant turn are left out, as for messages."""
    items = chat.list_from_cell(value, where, column, SHAREGPT_SHAPE)
    return chat.through_last_reply([_turn(item, where, column, i, roles) for i, item in enumerate(items)], where)


def _turn(item: Any, where: str, column: str, index: int, roles: Mapping[str, str]) -> chat.Message:
    if not isinstance(item, dict) or "from" not in item or "value" not in item:
        raise DataError(f"{where}: turn {index} of column '{column}' is {str(item)[:80]!r}, not an object with `from` "
                        f"and `value`. Write each conversation as {SHAREGPT_SHAPE}; for a list of {{role, content}} "
                        f"(OpenAI's format) set data.chat_format: messages and data.messages_column: {column}.")
    name = item["from"]
    role = roles.get(str(name).strip().lower())
    if role is None:
        raise DataError(f"{where}: turn {index} of column '{column}' is from {name!r}, a role finesweep does not know "
                        f"(it knows {', '.join(roles)}). Fix: say which role it is in the sweep file, e.g. "
                        f"data.roles: {{{name}: user}} (user, assistant or system; the loss is on assistant turns), "
                        "or rename it in the file.")
    return chat.message(role, item["value"])


def from_alpaca(instruction: str, input_text: str, output: str) -> list[chat.Message]:
    """Alpaca's columns as a one-turn conversation: the user turn is the instruction, then a blank line and the
    input when there is one ("{instruction}\\n\\n{input}", as Alpaca's own template orders them); the output is
    the reply."""
    prompt = ALPACA_JOIN.join(part for part in (instruction, input_text) if part)
    return chat.conversation_from_columns(prompt, output, None)


def _with_system(config: DataConfig, row: Row, where: str, messages: list[chat.Message]) -> list[chat.Message]:
    """The system column's prompt (data.system_column) as the first turn, when the row has one."""
    system = cell_text(row.get(config.system_column)) if config.system_column else ""
    if not system:
        return messages
    if messages and messages[0]["role"] == "system":
        raise DataError(f"{where}: a system prompt in column '{config.system_column}' (data.system_column) and a "
                        "system turn in the conversation; a conversation has one system prompt. Fix: keep one of "
                        "them, or unset data.system_column.")
    return [chat.message("system", system), *messages]
