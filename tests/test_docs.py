"""The repository speaks of the product only: no numbered or ordinal rounds of work ("session 14", "(sixtieth)"), no
issue numbers, no machine loans or leases, no notes kept outside the repository, and no Markdown link to a file the
repository does not hold. `findings` is the checker; the last tests run it over the pages, the tracked code, scripts
and configuration, and the tracked file names."""

from __future__ import annotations

import bisect
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SMALL = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
          "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth")
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_TIETH = "(?:twent|thirt|fort|fift|sixt|sevent|eight|ninet)ieth"
# A spelled ordinal ("fourth", "forty-ninth", "sixtieth") or a numbered one ("41st").
ORDINAL = rf"(?:(?:{_TENS})-(?:{_SMALL})|{_TIETH}|{_SMALL}|\d+(?:st|nd|rd|th))"
WORK = r"(?:sessions?|rounds?|leases?|loans?)"

PROCESS = [
    ("a round of work by its ordinal", re.compile(rf"\b{ORDINAL}[\s-]+{WORK}\b", re.IGNORECASE)),
    ("a round of work by its number", re.compile(rf"\b{WORK}[ -]?#?\d+\b(?!\.\d)", re.IGNORECASE)),
    # "(sixtieth)" names a round of work; "(first)" may be a plain word, and "too_slow(first)" is a call.
    ("an ordinal alone in brackets", re.compile(rf"(?<![\w.])\((?!(?:first|second|third|fourth)\b){ORDINAL}\)",
                                                re.IGNORECASE)),
    # Past the twelfth, a spelled ordinal counts rounds of work: the product counts nothing that far in words.
    ("a spelled ordinal past the twelfth", re.compile(
        rf"\b(?:(?:{_TENS})-(?:{_SMALL})|{_TIETH}|(?:thir|four|fif|six|seven|eigh|nine)teenth)\b", re.IGNORECASE)),
    ("an issue number", re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)),
    ("a machine loan or lease", re.compile(r"\b(?:loan(?:s|ed)?|lease[sd]?)\b", re.IGNORECASE)),
    ("the house move", re.compile(r"\bhouse[ -]move\b", re.IGNORECASE)),
    ("rooms for project folders", re.compile(r"\brooms\b|<room>|\broom (?:folder|package)s?\b", re.IGNORECASE)),
    ("a note kept outside the repository", re.compile(r"\b(?:FACTS|DESIGN)\.md\b|\.\./shared\b")),
]
# Every match of a pattern above holds one of these (lower case): only the lines that hold one are searched.
KEYWORDS = ("session", "round", "lease", "loan", "th)", "st)", "nd)", "rd)", "ieth", "teenth", "ty-", "issue", "house",
            "room", "facts.md", "design.md", "../shared")

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.IGNORECASE)


def findings(text: str, *, markdown: bool = False, present: set[str] | None = None,
             where: str = "") -> list[str]:
    """Each piece of process vocabulary in `text`, as 'line N: what: "match"'; for Markdown (`markdown`), each
    relative link whose target is not among `present` (repository paths, '/'-separated, folders included), resolved
    from `where`, the page's own path."""
    found = []
    lines = text.split("\n")
    for number in _lines_with_keywords(text):
        line = lines[number - 1]
        matches = sorted((match.start(), -match.end(), what, match.group(0)) for what, pattern in PROCESS
                         for match in pattern.finditer(line))
        end = -1
        for start, negative_end, what, words in matches:  # the widest of overlapping matches, once
            if start >= end:
                found.append(f'line {number}: {what}: "{words}"')
                end = -negative_end
    if markdown and present is not None:
        prose = INLINE_CODE.sub("", FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text))
        for number, line in enumerate(prose.split("\n"), 1):
            for target in INLINE_LINK.findall(line) + REFERENCE_LINK.findall(line):
                if EXTERNAL.match(target):
                    continue
                path = _resolved(where, target.split("#", 1)[0].split("?", 1)[0])
                if path not in present:
                    found.append(f'line {number}: a link to a file the repository does not hold: "{target}"')
    return found


def _lines_with_keywords(text: str) -> list[int]:
    """The numbers of the lines that hold a keyword (str.find, not a regex at every character: fast on long pages)."""
    lower, hits = text.lower(), set()
    if len(lower) != len(text):  # a letter that lower-cases to two ("İ") would shift the offsets: every line then
        return list(range(1, text.count("\n") + 2))
    for keyword in KEYWORDS:
        at = lower.find(keyword)
        while at != -1:
            hits.add(at)
            at = lower.find(keyword, at + 1)
    starts = [0] + [match.end() for match in re.finditer("\n", text)]
    return sorted({bisect.bisect(starts, at) for at in hits})


def _resolved(where: str, target: str) -> str:
    """The repository path a link from the page `where` leads to ('..' when it leaves the repository)."""
    parts: list[str] = []
    for part in (PurePosixPath(where).parent / target).parts:
        if part == "..":
            if not parts:
                return ".."
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return "/".join(parts) or "."


# --- the checker on planted strings ---

@pytest.mark.parametrize("line", [
    "## Result (2026-11-27, forty-ninth session)",
    "the figure of the fortieth session",
    "measured in session 14 on the AVX2 machine",
    "results-tweets-avx512-bf16-session41.json",
    "the same run (sixtieth)",
    "as measured then (eleventh)",
    "the 41st round of the benchmark",
    "issue 29's bar",
    "bar 3 of issue #29",
    "on the fourth lease of the GPU",
    "the GPU loan ran out",
    "the machines leased to us",
    "modules that sweeps saved before the house move",
    "the three rooms are mapped under finesweep",
    "as measured (FACTS.md)",
    "DESIGN.md names the import graph",
    "see ../shared/notes for the run",
])
def test_the_checker_flags_process_vocabulary(line):
    assert findings(line), line


@pytest.mark.parametrize("line", [
    "session = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])",
    "found = default_temp_dir().glob('session_*/artifacts/*/working_dirs/trial-*')",
    "ls /tmp/ray/session_latest/logs",
    "list(temp_dir.glob(f'session_2*/logs/python-core-driver-*_{pid}.log'))",
    '@pytest.fixture(scope="session")',
    "with requests.Session() as http:",
    "the newest release that passed; releases past these bounds; it releases their GPUs",
    "the 99th percentile of the prompts; the 60th step; the third evaluation in a row",
    "a trial's room is half the trials' budget; room for every axis' tick labels",
    "phases[phase] = round(phases.get(phase, 0.0) + now - mark, 1)",
    "round 0.5 up to the whole step",
    "reason = too_slow(first); the duplicates' (first) label",
    "an HTTP session to the tracking server; the test session's machine cache",
    "the second driver session's experiment state is cut: the first one's is read",
    "MLFLOW_ARTIFACTS=/shared/mlartifacts mlflow/start-server.sh",
    "issues are welcome; a GitHub issue names the version",
])
def test_the_checker_passes_product_words(line):
    assert findings(line) == []


def test_the_checker_names_the_line_and_the_match():
    text = "# Results\n\nmeasured on 2 AVX2 cores\n## Result (2026-11-27, forty-ninth session)\n"
    assert findings(text) == ['line 4: a round of work by its ordinal: "forty-ninth session"']


def test_the_checker_counts_lines_past_a_letter_that_lower_cases_to_two():
    assert findings("İstanbul\nthe fortieth session") == [
        'line 2: a round of work by its ordinal: "fortieth session"']


def test_the_checker_follows_markdown_links():
    present = {"README.md", "docs", "docs/cli.md", "benchmarks", "benchmarks/README.md"}
    page = ("See [the CLI](cli.md#run), [the benchmarks](../benchmarks/README.md), [home](https://example.org),\n"
            "[this heading](#top) and [a gone page](gone.md).\n"
            "```bash\ncat [not a link](nowhere.md)\n```\n"
            "`[code](nowhere.md)` and [the notes](../../shared/notes.md)\n"
            "[ref]: ../benchmarks/missing.json\n")
    assert findings(page, markdown=True, present=present, where="docs/page.md") == [
        'line 6: a note kept outside the repository: "../shared"',
        'line 2: a link to a file the repository does not hold: "gone.md"',
        'line 6: a link to a file the repository does not hold: "../../shared/notes.md"',
        'line 7: a link to a file the repository does not hold: "../benchmarks/missing.json"',
    ]


# --- the checker over the repository ---

def _repository() -> tuple[list[str], set[str]]:
    """The tracked files, and every path the repository holds (tracked or new and not ignored, folders included)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    present = {path for path in listed if path and (ROOT / path).exists()}
    present |= {str(parent) for path in present for parent in PurePosixPath(path).parents if str(parent) != "."}
    return [path for path in tracked if path and (ROOT / path).exists()], present


def _checked(tracked: list[str]) -> list[str]:
    """README.md, docs/, the other tracked pages, and every tracked .py, .sh, .toml and .yaml file and CI script, but
    this one: its planted strings are there to be found."""
    kinds = (".md", ".py", ".sh", ".toml", ".yaml", ".yml")
    return [path for path in tracked if (path.endswith(kinds) or path.startswith(".ci/"))
            and path != "tests/test_docs.py"]


def test_the_repository_speaks_of_the_product_only():
    tracked, present = _repository()
    flagged = []
    for path in _checked(tracked):
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        flagged += [f"{path}: {finding}" for finding in
                    findings(text, markdown=path.endswith(".md"), present=present, where=path)]
    assert not flagged, "\n".join(flagged)


def test_the_tracked_file_names_speak_of_the_product_only():
    tracked, _ = _repository()
    flagged = [f"{path}: {finding.split(': ', 1)[1]}" for path in tracked for finding in findings(path)]
    assert not flagged, "\n".join(flagged)


# The pages a user reads to judge the product: one screen of answers, and one section per benchmark.
PAGE_LIMITS = {"docs/benchmarks.md": 120, "benchmarks/README.md": 400}


@pytest.mark.parametrize("page", sorted(PAGE_LIMITS))
def test_the_benchmark_pages_stay_within_their_length(page):
    lines = len((ROOT / page).read_text(encoding="utf-8").splitlines())
    assert lines <= PAGE_LIMITS[page], f"{page} has {lines} lines, more than {PAGE_LIMITS[page]}: say less, or link"
