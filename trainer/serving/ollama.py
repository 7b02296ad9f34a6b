"""An Ollama Modelfile for an exported GGUF file: the chat template the model was fine-tuned with, written in Ollama's
template language (Go's text/template over `.Messages`), its stop tokens, and its default system message.

Ollama reads a GGUF's own Jinja template only when it recognises it; a Modelfile's TEMPLATE is what it always
follows. The template is not translated from Jinja (a language Go's templates cannot run) but measured: the model's
template renders a conversation whose contents are unique markers, and what it writes around each marker is that
role's prefix and suffix. That holds for the role-block formats (ChatML, Llama 3, Zephyr, Gemma and their kin), whose
text around a message depends on its role alone; a template it does not fit (what it writes between two messages
depends on more than their roles) gives no Modelfile TEMPLATE, and the Modelfile says so. Pure: a tokenizer in,
text out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = ("system", "user", "assistant")
# Contents no template writes by itself, so each is found once in the rendering.
MARKERS = {"system": "\x02SYSTEM\x03", "user": "\x02USER-1\x03", "assistant": "\x02ASSISTANT-1\x03",
           "user2": "\x02USER-2\x03", "assistant2": "\x02ASSISTANT-2\x03"}
GGUF_FILE = "model.gguf"


@dataclass(frozen=True)
class ChatBlocks:
    """What a role-block chat template writes before and after each role's content, at the start of every
    conversation (`start`: a beginning-of-sequence text, say) and to ask for the assistant's reply (`generation`);
    `default_system`: the system message it adds where a conversation has none; `start_added`: whether the tokenizer
    adds `start` to any text itself (then llama.cpp does too, and a Modelfile must not write it again)."""

    prefix: dict[str, str]
    suffix: dict[str, str]
    start: str
    generation: str
    default_system: str | None
    start_added: bool


def chat_blocks(tokenizer: Any) -> ChatBlocks | None:
    """The tokenizer's chat template as role blocks, or None where it is not one (or renders no system turn)."""
    try:
        full = _render(tokenizer, _conversation(True, 2), False)
        asked = _render(tokenizer, _conversation(True, 1)[:2], True)
        unasked = _render(tokenizer, _conversation(True, 1)[:2], False)
        without_system = _render(tokenizer, _conversation(False, 1), False)
    except Exception:  # noqa: BLE001 - a template that refuses these conversations is not one of role blocks
        return None
    if not all(marker in full for marker in MARKERS.values()) or not asked.startswith(unasked):
        return None
    generation = asked[len(unasked):]
    head, after_system, user_to_assistant, assistant_to_user, user2_to_assistant2, tail = \
        _gaps(full, ["system", "user", "assistant", "user2", "assistant2"])
    if user_to_assistant != user2_to_assistant2 or not assistant_to_user.startswith(tail) \
            or not user_to_assistant.endswith(generation):
        return None
    user_prefix = assistant_to_user[len(tail):]
    first_user = without_system.find(user_prefix + MARKERS["user"])
    if not after_system.endswith(user_prefix) or first_user < 0:
        return None
    suffix = {"system": after_system[:len(after_system) - len(user_prefix)],
              "user": user_to_assistant[:len(user_to_assistant) - len(generation)], "assistant": tail}
    before_user = without_system[:first_user]
    default = _default_system(before_user, head, suffix["system"])
    start = _start(tokenizer, head, before_user, default)
    prefix = {"system": head[len(start):], "user": user_prefix, "assistant": generation}
    return ChatBlocks(prefix, suffix, start, generation, default, bool(start) and _adds(tokenizer, start))


def _conversation(with_system: bool, exchanges: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": MARKERS["system"]}] if with_system else []
    for index in range(1, exchanges + 1):
        suffix = "" if index == 1 else str(index)
        messages += [{"role": "user", "content": MARKERS["user" + suffix]},
                     {"role": "assistant", "content": MARKERS["assistant" + suffix]}]
    return messages


def _render(tokenizer: Any, messages: list[dict[str, str]], generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)


def _gaps(text: str, order: list[str]) -> list[str]:
    """The text before the first marker, between each two, and after the last."""
    gaps, position = [], 0
    for name in order:
        found = text.index(MARKERS[name], position)
        gaps.append(text[position:found])
        position = found + len(MARKERS[name])
    return gaps + [text[position:]]


def _default_system(before_user: str, head: str, system_suffix: str) -> str | None:
    """The system message the template writes where a conversation has none (SmolLM2's "You are a helpful AI
    assistant named SmolLM, ..."): what stands between the system block's opening (`head`) and its suffix."""
    if not head or not system_suffix or not before_user.startswith(head) or not before_user.endswith(system_suffix):
        return None
    return before_user[len(head):len(before_user) - len(system_suffix)] or None


def _start(tokenizer: Any, head: str, before_user: str, default: str | None) -> str:
    """What the template writes at the start of every conversation, before its first block. Without a default system
    message, what it writes before a first user message; with one, the system block always opens the conversation
    (the Modelfile's SYSTEM) and only a beginning-of-sequence text the tokenizer adds itself is told apart."""
    if default is None:
        return before_user if head.startswith(before_user) else ""
    bos = getattr(tokenizer, "bos_token", None)
    return bos if bos and head.startswith(bos) and _adds(tokenizer, bos) else ""


def _adds(tokenizer: Any, text: str) -> bool:
    """Whether the tokenizer puts `text` (one special token's) before any text it encodes."""
    token = tokenizer.convert_tokens_to_ids(text)
    return token is not None and tokenizer("a")["input_ids"][:1] == [token]


def go_template(blocks: ChatBlocks) -> str:
    """The blocks in Ollama's template language: each message of `.Messages` in its role's prefix and suffix, then
    the assistant's prefix that asks for a reply. One line, no trim markers: `{{-` would also eat the newlines the
    format ends its blocks with."""
    branches = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq .Role "{role}" }}}}'
        f"{_literal(blocks.prefix[role])}{{{{ .Content }}}}{_literal(blocks.suffix[role])}"
        for i, role in enumerate(ROLES))
    start = "" if blocks.start_added else _literal(blocks.start)
    return f"{start}{{{{ range .Messages }}}}{branches}{{{{ end }}}}{{{{ end }}}}{_literal(blocks.generation)}"


def _literal(text: str) -> str:
    """Text as a Go template writes it: braces that would open an action are written by an action."""
    return text.replace("{{", '{{ "{{" }}')


def modelfile(tokenizer: Any, stop_tokens: list[str], gguf_file: str = GGUF_FILE) -> str:
    """The Modelfile `ollama create <name> -f Modelfile` reads beside the GGUF file."""
    lines = [f"FROM ./{gguf_file}"]
    blocks = chat_blocks(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    if blocks is not None:
        lines.append(f'TEMPLATE """{go_template(blocks)}"""')
        if blocks.default_system:
            lines.append(f'SYSTEM """{blocks.default_system}"""')
    elif getattr(tokenizer, "chat_template", None):
        lines.append("# The chat template is not one of role blocks; Ollama uses the GGUF's own where it knows it.")
    else:
        lines.append('# Fine-tuned on plain text, without a chat template: prompt it with raw text.\nTEMPLATE """{{ .Prompt }}"""')
    lines += [f'PARAMETER stop "{token}"' for token in stop_tokens]
    return "\n".join(lines) + "\n"
