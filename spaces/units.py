"""Human byte sizes as written in sweep files."""

import re

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
# What parse_bytes reads, as a JSON Schema pattern for editors (the sweep file's validator calls parse_bytes itself).
BYTES_PATTERN = r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][iI]?[bB]|[bB])?\s*$"


def parse_bytes(text: str) -> int:
    """'6GiB' -> 6442450944; '500MB' -> 500000000."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"not a byte size: {text!r}; write e.g. 6GiB or 500MB")
    return int(float(match.group(1)) * _UNITS[unit])


_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """'600s' -> 600; '10m' -> 600; '1.5h' -> 5400. The unit is required: a bare 10 could mean either."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhSMH])\s*", str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"not a duration: {text!r}; write a positive number with its unit, e.g. 600s, 10m or 1.5h")
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]
