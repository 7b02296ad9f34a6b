"""The README's first command on a fresh clone: `bash scripts/setup.sh && .venv/bin/finesweep run sweeps/tweets.yaml`,
timed from the clone to the command's exit, its console kept. Clones this checkout's HEAD into a temporary folder
(set-up from the lock, as a newcomer's), runs the command there, and writes beside this script quickstart-tweets-<cpu
kind>-<date>-<commit>.json (the times, the disk the set-up and the sweep took, the phases, the test table, the deploy
pick, the winner and the baseline comparison from the run's summary.json) and the console's lines in a .log of the
same name: what docs/quickstart.md quotes.

    .venv/bin/python benchmarks/quickstart/fresh_clone.py      # about 10 minutes on 2 cores
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

# The result file's name and the machine facts every benchmark records (benchmarks/naming.py).
_spec = importlib.util.spec_from_file_location("naming", Path(__file__).resolve().parents[1] / "naming.py")
naming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(naming)

HERE = Path(__file__).resolve().parent
SETUP = "bash scripts/setup.sh"
RUN = ".venv/bin/finesweep run sweeps/tweets.yaml"
KEPT = ("phase_seconds", "test_metrics", "deploy", "best", "baseline", "exploitation")


def _bytes(folder: Path) -> int:
    """What `folder` holds on disk, its files' sizes summed."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def main() -> None:
    recorded = naming.facts()
    with tempfile.TemporaryDirectory() as folder:
        clone = Path(folder) / "finesweep"
        started = time.time()
        subprocess.run(["git", "clone", "-q", str(naming.REPO), str(clone)], check=True)
        subprocess.run(SETUP, shell=True, cwd=clone, check=True, stdout=subprocess.DEVNULL)
        run_started = time.time()
        console = subprocess.run(RUN, shell=True, cwd=clone, capture_output=True, text=True,
                                 env={**os.environ, "HF_HUB_OFFLINE": "1"})
        finished = time.time()
        if console.returncode != 0:
            raise SystemExit(f"{RUN} exited {console.returncode}:\n{console.stdout[-3000:]}{console.stderr[-3000:]}")
        summary = json.loads(next((clone / "runs").rglob("summary.json")).read_text())
        disk = {"venv_bytes": _bytes(clone / ".venv"), "sweep_folder_bytes": _bytes(clone / "runs")}
    out = naming.result_path(HERE, "quickstart", "tweets", recorded)
    out.write_text(json.dumps({"benchmark": "quickstart", "command": f"{SETUP} && {RUN} (a fresh clone)", **recorded,
                               "setup_and_run_seconds": round(finished - started, 1),
                               "run_wall_seconds": round(finished - run_started, 1), **disk,
                               **{key: summary.get(key) for key in KEPT}}, indent=1) + "\n")
    out.with_suffix(".log").write_text(console.stdout)
    print(f"result: {out} (and its .log); run {finished - run_started:.0f} s, "
          f"test accuracy {summary['test_metrics']['full']['accuracy']}")


if __name__ == "__main__":
    main()
