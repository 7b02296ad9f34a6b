"""The sweep file's reference as Markdown, generated from the schema so docs/sweep-file.md never drifts from it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from finesweep.spaces.config import SweepConfig


def markdown_reference() -> str:
    """One table per section: key, default, meaning."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += _rows(SweepConfig, "")
    return "\n".join(lines) + "\n"


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        nested = _section_model(field.annotation)
        key = f"{prefix}{name}"
        if nested is not None and name != "models":
            rows += _rows(nested, f"{key}.")
            continue
        if name == "models":
            rows.append(f"| `models` | required | {field.description} Each entry: |")
            rows += _rows(nested, "models[].")
            continue
        rows.append(f"| `{key}` | {_default(field)} | {field.description or ''} |")
    return rows


def _section_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = getattr(annotation, "__args__", ())
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]  # list[Section]
    return None


def _default(field: Any) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [getattr(v, "value", v) for v in value]
    else:
        value = getattr(value, "value", value)
    return "unset" if value is None else f"`{json.dumps(value)}`"
