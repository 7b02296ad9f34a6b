"""The README and docs/ stay true: the sweep-file reference is the generated one, the commands they name exist, the
README stays a short front door, and every relative link leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from finesweep.search.cli import app
from finesweep.spaces.reference import markdown_reference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
NEWCOMER_COMMANDS = ("bash scripts/setup.sh && .venv/bin/finesweep run sweeps/tweets.yaml",
                     "bash scripts/setup.sh && .venv/bin/python -m pytest")
EXPECTED_PAGES = ("sweep-file", "llms", "gpus-and-clusters", "export-and-deploy", "mlflow", "how-it-works", "cli",
                  "benchmarks")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _registered() -> set[str]:
    return {command.name or command.callback.__name__ for command in app.registered_commands}


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _fenced(text: str, languages: tuple[str, ...] = ("bash", "sh", "shell", "")) -> list[str]:
    """The bodies of the fenced blocks whose language is one of `languages` ('' = no language given)."""
    blocks = re.findall(r"^```([\w-]*)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    return [body for language, body in blocks if language in languages]


def _prose(text: str) -> str:
    """The text outside fenced blocks (a link or heading inside a code block is code)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    """The anchor a Git forge (GitHub, GitLab, Gitea) gives a heading: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#* *$", _prose(_text(page)), flags=re.MULTILINE):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_the_docs_pages_are_there():
    assert (DOCS / "README.md").exists() or (DOCS / "index.md").exists()
    missing = [name for name in EXPECTED_PAGES if not (DOCS / f"{name}.md").exists()]
    assert not missing, f"docs pages missing: {missing}"


def test_the_reference_in_docs_matches_the_schema():
    text = _text(DOCS / "sweep-file.md")
    assert text.count("<!-- reference:start") == 1 and text.count("<!-- reference:end -->") == 1
    section = text.split("<!-- reference:start", 1)[1].split("-->", 1)[1].split("<!-- reference:end -->", 1)[0]
    assert section.strip() == markdown_reference().strip(), \
        "run `finesweep schema --markdown` and paste it between the markers of docs/sweep-file.md"


def test_the_reference_lives_in_one_place():
    elsewhere = [page.name for page in PAGES if page != DOCS / "sweep-file.md" and "reference:start" in _text(page)]
    assert not elsewhere, f"a second copy of the generated reference drifts: {elsewhere}"


def test_every_command_of_the_cli_table_exists():
    documented = set()
    for page in (README, DOCS / "cli.md"):
        for first_cell in re.findall(r"^\|( `finesweep [^|]*)\|", _text(page), flags=re.MULTILINE):
            documented |= set(re.findall(r"`finesweep (\w+)", first_cell))  # `finesweep status` / `finesweep best`
    assert {"run", "plan", "probe", "data", "ui", "export", "resume", "status", "best", "predict"} <= documented
    assert documented <= _registered(), f"documented but not commands: {documented - _registered()}"


def test_every_command_of_the_cli_is_in_the_table():
    documented = set(re.findall(r"`finesweep (\w+)", _text(DOCS / "cli.md")))
    assert _registered() <= documented, f"commands without a row in docs/cli.md: {_registered() - documented}"


def test_every_finesweep_command_in_a_shell_block_exists():
    named: dict[str, set[str]] = {}
    for page in PAGES:
        for block in _fenced(_text(page)):
            for command in re.findall(r"(?:^|[\s/])finesweep +([a-z][\w-]*)", block, flags=re.MULTILINE):
                named.setdefault(command, set()).add(page.name)
    assert {"run", "predict", "ui"} <= set(named)
    unknown = {command: pages for command, pages in named.items() if command not in _registered()}
    assert not unknown, f"shell blocks name commands finesweep does not have: {unknown}"


def test_the_two_newcomer_commands_are_on_the_first_screen():
    first_screen = "\n".join(_text(README).splitlines()[:40])
    for command in NEWCOMER_COMMANDS:
        assert command in first_screen, f"not in README.md's first 40 lines: {command}"


def test_the_readme_is_a_front_door():
    lines = _text(README).splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/"
    first_command = next(i for i, line in enumerate(lines) if line.startswith("```"))
    assert first_command < 40, "the first command must be on README.md's first screen (40 lines)"
    assert "docs/sweep-file.md" in _text(README) and "docs/cli.md" in _text(README)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_lead_to_files_and_headings(page: Path):
    broken = []
    for target in LINK.findall(_prose(_text(page))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not this repository's
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_prose_lines_stay_short(page: Path):
    """Lines of at most 120 characters, tables aside (a Markdown table row cannot be wrapped)."""
    long = [number for number, line in enumerate(_text(page).splitlines(), 1)
            if len(line) > 120 and not line.startswith("|")]
    assert not long, f"{page.relative_to(ROOT)}: lines over 120 characters: {long}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_sections_are_headings_not_bold_paragraphs(page: Path):
    bold_led = [line for line in _prose(_text(page)).splitlines() if re.match(r"^\*\*[^*]+\*\*[ .:]", line)]
    assert not bold_led, f"{page.relative_to(ROOT)}: use a heading instead of a bold-led paragraph: {bold_led}"
