"""The sweep file: schema, defaults, validation, and the search space. Imports no torch, ray or mlflow."""

from finesweep.spaces.config import DataConfig, ModelCandidate, SweepConfig
from finesweep.spaces.sections import Method, Precision, Quantization, Task
from finesweep.spaces.loader import SweepFileError, json_schema, load, resolve_path
from finesweep.spaces.space import suggest
from finesweep.spaces.units import parse_bytes, parse_duration

__all__ = [
    "DataConfig",
    "Method",
    "ModelCandidate",
    "Precision",
    "Quantization",
    "SweepConfig",
    "SweepFileError",
    "Task",
    "json_schema",
    "load",
    "parse_bytes",
    "parse_duration",
    "resolve_path",
    "suggest",
]
