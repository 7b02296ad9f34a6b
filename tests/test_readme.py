"""The README stays true: its sweep-file reference is the generated one, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from finesweep.search.cli import app
from finesweep.spaces.reference import markdown_reference

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_reference_matches_the_schema():
    section = README.split("<!-- reference:start", 1)[1].split("-->", 1)[1].split("<!-- reference:end -->", 1)[0]
    assert section.strip() == markdown_reference().strip(), "run `finesweep schema --markdown` and paste it into README.md"


def test_every_cli_command_in_the_readme_exists():
    documented = set(re.findall(r"^\| `finesweep (\w+)", README, flags=re.MULTILINE))
    registered = {command.name or command.callback.__name__ for command in app.registered_commands}
    assert documented and documented <= registered


def test_the_two_newcomer_commands_are_there():
    assert "bash scripts/setup.sh && .venv/bin/finesweep run sweeps/tweets.yaml" in README
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest" in README
