"""A non-editable install carries every module: pyproject.toml lists the packages by hand (the three top-level folders
are mapped under `finesweep`), so a new subpackage left out of the list works in the editable set-up and is missing
from a wheel (without `finesweep.trainer.serving`, `predict` and the export fail after `pip install .`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"spaces": "finesweep/spaces", "search": "finesweep/search", "trainer": "finesweep/trainer"}


def _source_modules() -> set[str]:
    """Every module of the three packages, as the wheel names it."""
    found = set()
    for source, package in PACKAGES.items():
        for path in (ROOT / source).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(f"{package}/{path.relative_to(ROOT / source).as_posix()}")
    return found


def _clean_copy(folder: Path) -> Path:
    """What the wheel is built from, without a build/ folder of an earlier build (setuptools would reuse its files)."""
    folder.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, folder / name)
    for source in PACKAGES:
        shutil.copytree(ROOT / source, folder / source, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def test_the_wheel_holds_every_module_of_the_three_packages(tmp_path):
    source = _clean_copy(tmp_path / "source")
    # --no-build-isolation: the locked setuptools of the test environment, nothing fetched.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(tmp_path / "wheel"), str(source)],
                           cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    wheel, = (tmp_path / "wheel").glob("finesweep-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name for name in archive.namelist() if name.endswith(".py")}
    missing = sorted(_source_modules() - packaged)
    assert not missing, f"add their packages to [tool.setuptools] packages in pyproject.toml: {missing}"
