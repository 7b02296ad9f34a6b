"""State files (sweep-state.json, summary.json, metrics.json, the probe cache...) are written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finesweep.spaces.files import write_json_atomic


def test_a_crash_mid_write_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    state = tmp_path / "sweep-state.json"
    write_json_atomic(state, {"tune_experiment": "tune-1", "root": Path("/runs/a")})
    assert json.loads(state.read_text()) == {"tune_experiment": "tune-1", "root": "/runs/a"}

    real_write = Path.write_text

    def killed_half_way(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)  # what a process killed mid-write leaves
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic(state, {"tune_experiment": "tune-2", "root": "/runs/a", "more": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(state.read_text())["tune_experiment"] == "tune-1", "the previous state, whole"
    assert [p.name for p in tmp_path.iterdir()] == ["sweep-state.json"], "no temporary file left"


def test_no_state_file_is_written_in_place_anywhere():
    """One writer for every JSON state file: a plain write elsewhere would bring the half-written file back."""
    root = Path(__file__).resolve().parents[2]
    offenders = [f"{path.relative_to(root)}:{number}"
                 for folder in ("search", "trainer", "spaces") for path in sorted((root / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if ("write_text(json.dumps" in line or "json.dump(" in line) and path.name != "files.py"]
    assert offenders == [], "use finesweep.spaces.files.write_json_atomic"
