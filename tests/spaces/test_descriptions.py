"""Every field of the sweep file says what it does in a short contract: the reference table in docs/sweep-file.md and
`finesweep schema` print these descriptions, and the why behind a default lives in docs/how-it-works.md."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from finesweep.spaces import json_schema

MAX_DESCRIPTION = 300


def _fields(schema: Any, where: str = "") -> list[tuple[str, Any]]:
    """Every (key path, description) of a JSON Schema's properties, in $defs and nested schemas alike."""
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for name, prop in value.items():
                    found.append((f"{where}.{name}", prop.get("description") if isinstance(prop, dict) else None))
                    found += _fields(prop, f"{where}.{name}")
            elif key == "$defs" and isinstance(value, dict):
                for name, definition in value.items():
                    found += _fields(definition, name)
            elif isinstance(value, (dict, list)):
                found += _fields(value, where)
    elif isinstance(schema, list):
        for item in schema:
            found += _fields(item, where)
    return found


def _problems(schema: dict[str, Any]) -> list[str]:
    """The fields whose description is missing, blank, or longer than MAX_DESCRIPTION characters."""
    problems = []
    for key, description in _fields(schema):
        if not isinstance(description, str) or not description.strip():
            problems.append(f"{key}: no description")
        elif len(description) > MAX_DESCRIPTION:
            problems.append(f"{key}: {len(description)} characters (at most {MAX_DESCRIPTION})")
    return problems


def test_the_schema_has_fields_to_check():
    keys = {key for key, _ in _fields(json_schema())}
    assert {".name", ".data", "DataConfig.path", "SearchConfig.metric", "SpaceConfig.dropout",
            "ExploitConfig.max_epochs", "BaselineRecipe.budget", "ExportConfig.quantization"} <= keys


def test_every_field_description_is_a_short_contract():
    problems = _problems(json_schema())
    assert not problems, ("field descriptions must be non-empty and at most "
                          f"{MAX_DESCRIPTION} characters (the why goes to docs/how-it-works.md): {problems}")


class _Example(BaseModel):
    short: int = Field(1, description="A short contract.")
    long: int = Field(1, description="x" * (MAX_DESCRIPTION + 1))
    blank: int = Field(1, description=" ")
    bare: int = 1


class _Outer(BaseModel):
    inner: _Example = Field(default_factory=_Example, description="A nested section.")


def test_the_check_refuses_long_blank_and_missing_descriptions():
    problems = _problems(_Outer.model_json_schema())
    assert problems == [f"_Example.long: {MAX_DESCRIPTION + 1} characters (at most {MAX_DESCRIPTION})",
                        "_Example.blank: no description", "_Example.bare: no description"]
