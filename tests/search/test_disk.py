"""What a sweep leaves on disk after its export (search/disk.py): the checkpoints' weights, not the state that only
training on from them reads."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from finesweep.search import sweep
from finesweep.search.disk import drop_optimizer_states


def _checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, size in (("model.safetensors", 300), ("optimizer.pt", 600), ("scheduler.pt", 7), ("scaler.pt", 5),
                       ("trainer_state.json", 9), ("row_scores.json", 11)):
        (folder / name).write_bytes(b"x" * size)
    return folder


def test_the_optimizer_state_goes_from_every_checkpoint_and_nothing_else_does(tmp_path):
    tune = tmp_path / "tune"
    kept = [_checkpoint(tune / "tune-1" / "trial-a" / "checkpoint_000000"),
            _checkpoint(tune / "tune-1-exploit" / "exploit-a" / "checkpoint_000003" / "checkpoint-40")]
    (tune / "tune-1" / "optimizer.pt").write_bytes(b"not a checkpoint's")
    assert drop_optimizer_states(tune) == 2 * (600 + 7 + 5)
    for folder in kept:
        assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors", "row_scores.json",
                                                              "trainer_state.json"]
    assert (tune / "tune-1" / "optimizer.pt").is_file(), "only inside a checkpoint"
    assert drop_optimizer_states(tune) == 0


def test_search_keep_optimizer_state_keeps_it_and_frees_nothing(tmp_path):
    folder = _checkpoint(tmp_path / "tune" / "tune-1" / "trial-a" / "checkpoint_000000")
    steps: list[str] = []
    session = SimpleNamespace(config=SimpleNamespace(search=SimpleNamespace(keep_optimizer_state=True)),
                              folder=SimpleNamespace(tune=tmp_path / "tune"), console=SimpleNamespace(step=steps.append))
    assert sweep._free_optimizer_states(session) == 0 and (folder / "optimizer.pt").is_file() and not steps
    session.config.search.keep_optimizer_state = False
    assert sweep._free_optimizer_states(session) == 612 and not (folder / "optimizer.pt").exists()
    assert steps and "search.keep_optimizer_state: true keeps it" in steps[0]
