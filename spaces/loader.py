"""Read a sweep file, validate all of it, and report every problem at once in the user's words."""

from __future__ import annotations

import difflib
import re
import importlib.util
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from finesweep.spaces.config import CHAT_TEMPLATE_SETTINGS, NAME_PATTERN, PACKAGE_SCHEME, SweepConfig, safe_name

_UNION_MEMBER_TAGS = {"float", "int", "str", "list[int]", "list[str]", "none"}
# Union members written as a mapping (a range, the baseline's recipe): their errors concern a mapping input only.
_MAPPING_MEMBERS = ("FloatRange", "MethodLearningRates", "BaselineRecipe")
# Names users bring from transformers' TrainingArguments, Optuna and peft, and the key finesweep reads instead (where
# the section has it). A close spelling is difflib's to find; these are the names no spelling rule connects.
KEYS_BY_OTHER_NAMES = {
    "lr": "learning_rate", "batch_size": "effective_batch_size", "per_device_train_batch_size": "effective_batch_size",
    "train_batch_size": "effective_batch_size", "gradient_accumulation_steps": "effective_batch_size",
    "fp16": "precision", "bf16": "precision", "dtype": "precision", "torch_dtype": "precision",
    "warmup_steps": "warmup_ratio", "r": "lora_r", "rank": "lora_r", "alpha": "lora_alpha",
    "eval_steps": "eval_every_steps", "n_trials": "num_trials", "trials": "num_trials", "sampler": "algorithm",
    "pruner": "scheduler", "direction": "mode", "timeout": "time_limit",
}
WHY_BY_KEY = {
    "effective_batch_size": " (samples per optimizer step: the probe picks the micro-batch and the gradient "
                            "accumulation that make it up)",
    "precision": " (a list of fp32, bf16, fp16 to search, or one of them)",
    "mode": " (min or max; unset, it follows search.metric)",
}
# What a model's name on the Hugging Face hub looks like ("bert-base-uncased", "org/model"): a models[].path written so
# is told about hub_id.
HUB_ID_SHAPE = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
EPOCH_NAMES = ("epochs", "num_train_epochs", "num_epochs", "max_epochs")
EPOCHS_HINT = ("finesweep trains by budget, not by epochs: search.max_steps caps each trial, search.time_budget_minutes "
               "(or `run --time-limit`) the whole search, search.exploit.max_epochs the winner's passes over the data. "
               "Remove it")



def _is_member_tag(part: object) -> bool:
    """pydantic names a union member in an error's location ('float', 'function-after[..., FloatRange]')."""
    return isinstance(part, str) and (part in _UNION_MEMBER_TAGS or "[" in part or _is_mapping_member(part))


def _is_mapping_member(part: str) -> bool:
    return any(name in part for name in _MAPPING_MEMBERS)


class SweepFileError(ValueError):
    """A sweep file the user must fix; the message is written for them, with no traceback."""


def load(path: str | Path) -> SweepConfig:
    """Parse and validate a sweep file; local paths in it become absolute."""
    path = Path(path)
    raw = _read_yaml(path)
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as error:
        raise SweepFileError(_describe(path, error, raw)) from None
    return _resolve_paths(config, path.resolve().parent, path)


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SweepFileError(f"sweep file {path}: not found. Check the path, or write one (see docs/sweep-file.md).")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise SweepFileError(f"sweep file {path}: not valid YAML ({error}). Fix the syntax at the line shown.") from None
    except UnicodeDecodeError as error:
        raise SweepFileError(f"sweep file {path}: not UTF-8 text ({error}). Save it as UTF-8.") from None
    if not isinstance(raw, dict):
        raise SweepFileError(
            f"sweep file {path}: the top level must be a mapping (name:, data:, models:, ...), "
            f"but got {type(raw).__name__}. See README, 'The sweep file'."
        )
    return raw


def _describe(path: Path, error: ValidationError, raw: dict[str, Any]) -> str:
    problems = [_describe_one(item, raw) for item in error.errors() if _is_relevant(item, raw)]
    problems = list(dict.fromkeys(problems))  # a union reports one input once per member
    return _problem_list(path, problems)


def _problem_list(path: Path, problems: list[str]) -> str:
    head = f"sweep file {path}: {len(problems)} problem{'s' if len(problems) > 1 else ''}:"
    return "\n".join([head, *(f"  - {p}" for p in problems)])


def _is_relevant(item: dict[str, Any], raw: dict[str, Any]) -> bool:
    """Of a union's per-member errors keep the member matching the input's shape (range vs value), at every union
    on the error's path (a range inside a learning rate per method)."""
    loc = item["loc"]
    for i, part in enumerate(loc):
        if _is_member_tag(part):
            given = _lookup(raw, [p for p in loc[:i] if not _is_member_tag(p)])
            if _is_mapping_member(part) != isinstance(given, dict):
                return False
    return True


def _describe_one(item: dict[str, Any], raw: dict[str, Any]) -> str:
    loc = [p for p in item["loc"] if not _is_member_tag(p)]
    if not loc and item["type"] == "value_error":  # checks across sections name their own fields
        return item["msg"].removeprefix("Value error, ") + "."
    where = _yaml_path(loc) or "(top level)"
    kind = item["type"]
    if kind == "extra_forbidden":
        return f"{where}: unknown key. {_suggest(loc, raw)}"
    if kind == "missing":
        return f"{where}: required but missing. Add it (see docs/sweep-file.md)."
    found = item.get("input")
    if kind == "string_pattern_mismatch" and item.get("ctx", {}).get("pattern") == NAME_PATTERN:
        return f"{where}: use only letters, digits, '.', '_' and '-', but found {found!r}. Rename it, e.g. {safe_name(str(found))!r}."
    message = item["msg"].removeprefix("Value error, ")
    found_text = "" if kind == "value_error" or isinstance(found, dict) else f", but found {found!r}"
    return f"{where}: {message}{found_text}."


def _suggest(loc: list[Any], raw: dict[str, Any]) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    known = sorted(model.model_fields) if model else []
    if key.lower() in EPOCH_NAMES and "max_epochs" not in known:
        return f"{EPOCHS_HINT}."
    other = KEYS_BY_OTHER_NAMES.get(key.lower())
    if other in known:
        return f"finesweep calls it `{other}`{WHY_BY_KEY.get(other, '')}. Known keys here: {', '.join(known)}."
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"Did you mean `{close[0]}`? Known keys here: {', '.join(known)}."
    return f"Remove it; known keys here: {', '.join(known)}."


def _model_at(loc: list[Any]) -> type[BaseModel] | None:
    """The pydantic model describing the mapping at `loc`, for listing its keys."""
    model: Any = SweepConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model else None
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _first_model(arg)
        if found:
            return found
    return None


def _yaml_path(loc: list[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _lookup(raw: Any, loc: list[Any]) -> Any:
    for part in loc:
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def resolve_path(value: str, base_dir: Path) -> Path:
    """A path from the sweep file: pkg://package/rest is inside an installed package; else relative to base_dir."""
    if value.startswith(PACKAGE_SCHEME):
        package, _, rest = value[len(PACKAGE_SCHEME):].partition("/")
        # find_spec locates the folder without importing the package (some fail to import).
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"{value}: no installed package named '{package}'. Install it (pip install {package.replace('_', '-')}) "
                "or give a plain path"
            )
        return Path(list(spec.submodule_search_locations)[0]) / rest
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base_dir / path).resolve()


def _resolve_paths(config: SweepConfig, base_dir: Path, sweep_path: Path) -> SweepConfig:
    problems: list[str] = []

    def resolved(where: str, value: str) -> str:
        try:
            return str(resolve_path(value, base_dir))
        except FileNotFoundError as error:
            problems.append(f"{where}: {error}.")
            return value

    data_paths = {key: resolved(f"data.{key}", value) for key in ("path", "validation_path", "test_path")
                  if (value := getattr(config.data, key)) is not None}
    if config.data.chat_template not in CHAT_TEMPLATE_SETTINGS:  # otherwise a Jinja file
        data_paths["chat_template"] = resolved("data.chat_template", config.data.chat_template)
    data = config.data.model_copy(update=data_paths)
    models = [
        m.model_copy(update={"path": resolved(f"models[{i}].path", m.path)}) if m.path else m
        for i, m in enumerate(config.models)
    ]
    # Every path is checked before anything loads: a missing model folder would otherwise be taken for a hub id
    # by transformers, which fails far later with an error about repository names.
    for key, value in data_paths.items():
        _check_exists(problems, f"data.{key}", config.data.model_dump()[key], Path(value), base_dir)
    for i, (given, model) in enumerate(zip(config.models, models)):
        if model.path:
            _check_exists(problems, f"models[{i}].path", given.path, Path(model.path), base_dir, folder=True)
            if model.gguf_file:
                _check_exists(problems, f"models[{i}].gguf_file", model.gguf_file, Path(model.path) / model.gguf_file,
                              base_dir)
    if problems:
        raise SweepFileError(_problem_list(sweep_path, problems))
    return config.model_copy(update={"data": data, "models": models})


def _check_exists(problems: list[str], where: str, given: str, path: Path, base_dir: Path, folder: bool = False) -> None:
    """Adds a problem when `path` (what `given` resolved to) does not exist, or is not a folder where one is needed."""
    if problems and any(p.startswith(f"{where}:") for p in problems):
        return  # already reported (e.g. an unknown pkg:// package)
    relative = "" if Path(given).is_absolute() or given.startswith(PACKAGE_SCHEME) else f" (relative to {base_dir})"
    if not path.exists():
        hub = (f" If '{given}' names a model on the Hugging Face hub, write `hub_id: {given}` in place of `path` (its "
               "download needs a network)." if folder and HUB_ID_SHAPE.fullmatch(given) else "")
        problems.append(f"{where}: nothing at {given!r}, resolved to {path}{relative}. Fix the path (paths in a sweep "
                        "file are relative to the sweep file's folder), or pkg://package/inside/path for a file an "
                        f"installed package ships.{hub}")
    elif folder and not path.is_dir():
        problems.append(f"{where}: {path} is a file, but a model is a folder (config.json, weights, tokenizer files); "
                        "give the folder that holds it (for a GGUF file: the folder as path, the file name as gguf_file).")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the sweep file, for editors."""
    schema = SweepConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "finesweep sweep file"
    return schema
