"""requirements-lock.txt (what scripts/setup.sh installs) stays within pyproject.toml's ranges: a range changed without
running scripts/lock.sh fails here, not on a newcomer's machine."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _locked() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", (ROOT / "requirements-lock.txt").read_text(), re.M)
    return {canonicalize_name(name): version for name, version in pins}


def _required() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]


def test_the_lock_pins_every_requirement_within_its_range():
    locked = _locked()
    outside = {}
    for requirement in _required():
        name = canonicalize_name(requirement.name)
        if name == "torch":
            assert name not in locked  # setup.sh installs the build that fits the machine
            continue
        if name not in locked or not requirement.specifier.contains(locked[name], prereleases=True):
            outside[str(requirement)] = locked.get(name, "not in the lock")
    assert not outside, f"run scripts/lock.sh: {outside}"


def test_the_lock_checks_hashes_and_leaves_torch_out():
    text = (ROOT / "requirements-lock.txt").read_text()
    blocks = re.findall(r"^([A-Za-z0-9_.-]+==\S+)((?:\s+\\\n\s+--hash=sha256:[0-9a-f]{64})*)", text, re.M)
    assert len(blocks) == len(_locked()) > 100 and all(hashes for _, hashes in blocks)
    assert "ray==" in text and "transformers==" in text and not re.search(r"^torch==", text, re.M)
