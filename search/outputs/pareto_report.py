"""The Pareto report of a sweep with a second objective: printed, pareto.json and its plot in the sweep folder and on
the parent run, the rule and the pick tagged there; and the checkpoint to export (selection/pareto.py decides)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from finesweep.search.selection.best import Best, pick_best, search_trial_name
from finesweep.search.selection.pareto import (THROUGHPUT, pareto_front, pareto_report, pick_point, rule_text,
                                               trial_points)
from finesweep.search.tracking.tags import PICK_TAG, RULE_TAG
from finesweep.spaces.files import write_json_atomic

if TYPE_CHECKING:
    from finesweep.search.outputs.console import Console
    from finesweep.search.tracking.client import Tracker
    from finesweep.spaces.config import SearchConfig

PARETO_FILE = "pareto.json"  # artifact on the parent run, and a copy in the sweep folder
PLOT_FILE = "pareto_front.png"  # under plots/ on the parent run


def pick_export(results, search: "SearchConfig", tracker: "Tracker", parent_run_id: str, console: "Console",
                out_dir: Path) -> Best | None:
    """The checkpoint to export. Without a second objective: pick_best, as ever. With one: the front printed,
    pareto.json (and its plot) in `out_dir` and on the parent run, the rule and the pick tagged there, and the
    best checkpoint of the trial the rule names."""
    if search.second_objective == "none":
        return pick_best(results, search.metric, search.mode)
    points = trial_points(results, search.metric, search.mode)
    front = pareto_front(points, search.mode)
    chosen = pick_point(points, search.mode, search.pick, search.pick_tolerance)
    report = pareto_report(points, front, chosen, search)
    write_json_atomic(out_dir / PARETO_FILE, report)
    tracker.log_json(parent_run_id, report, PARETO_FILE)
    if plot := draw_front(report, out_dir / "plots" / PLOT_FILE, console.warn):
        tracker.log_file(parent_run_id, plot, "plots")
    pick = (f"{search_trial_name(chosen.trial_id)} step {chosen.best.step}" if chosen
            else "none: no trial reported an evaluation")
    tracker.set_tags(parent_run_id, {RULE_TAG: rule_text(search), PICK_TAG: pick})
    console.pareto(report)
    return chosen.best if chosen else None


def draw_front(report: dict[str, Any], path: Path, warn: Callable[[str], None]) -> Path | None:
    """A scatter of every trial (throughput against the metric), the front joined and the pick ringed. A plot that
    fails costs a warning, never the sweep."""
    if not report["points"]:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display in a sweep; idempotent when the plots already chose it
        import matplotlib.pyplot as plt

        metric = report["metric"]
        figure, axes = plt.subplots(figsize=(6.4, 4.8))
        try:
            rest = [p for p in report["points"] if not p["on_front"]]
            front = [p for p in report["points"] if p["on_front"]]
            axes.scatter([p[THROUGHPUT] for p in rest], [p[metric] for p in rest], color="0.6", label="trial")
            axes.plot([p[THROUGHPUT] for p in front], [p[metric] for p in front], "o-", color="C0", label="Pareto front")
            for p in report["points"]:
                axes.annotate(p["trial_id"], (p[THROUGHPUT], p[metric]), fontsize="x-small",
                              xytext=(3, 3), textcoords="offset points")
            if pick := report["pick"]:
                axes.scatter([pick[THROUGHPUT]], [pick[metric]], s=250, facecolors="none", edgecolors="C3",
                             linewidths=2, label=f"exported ({report['rule']})")
            axes.set(xlabel="training samples / s", ylabel=f"best {metric}", title="Speed against quality")
            axes.legend(fontsize="small")
            path.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(path, dpi=100, bbox_inches="tight")
        finally:
            plt.close(figure)
        return path
    except Exception as error:  # the plot is a report on the sweep, never a reason for it to fail
        warn(f"Pareto plot skipped: {type(error).__name__}: {error}")
        return None
