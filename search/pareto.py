"""Speed against quality: each trial's best metric and its training throughput, the Pareto front over them, and
the stated rule (search.pick) that names the trial whose best checkpoint is exported.

Throughput, not cost per trial, is the second objective: a trial's cost depends on how long ASHA let it run, so an
early-stopped trial would look cheap whatever its configuration; throughput is a property of the configuration
itself (model, precision, method, micro-batch) and what a user pays per unit of data in the end.

The pure functions (trial_points, pareto_front, pick_point, pareto_report) take Tune results or plain points;
`pick_export` is the sweep's one entry: it prints, logs and tags, then returns the checkpoint to export.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from finesweep.search.best import BEST_SO_FAR, Best, pick_best

if TYPE_CHECKING:
    from finesweep.search.report import Console
    from finesweep.search.tracking import Tracker
    from finesweep.spaces.config import SearchConfig

# The trial's own throughput, as each evaluation reports it (trainer/trial.py): training samples per second of wall
# time since the Trainer began (or resumed), evaluations and saves included; model loading and imports are not in
# it. The last report covers the whole trial, and it is the result Tune hands to Optuna. Samples, not tokens:
# between candidates with different tokenizers, tokens/s would favour the chattier tokenizer.
THROUGHPUT = "train_samples_per_second_so_far"
SECOND_OBJECTIVES = {"throughput": (THROUGHPUT, "max")}  # search.second_objective -> (result key, mode)
PARETO_FILE = "pareto.json"  # artifact on the parent run, and a copy in the sweep folder
PLOT_FILE = "pareto_front.png"  # under plots/ on the parent run
RULE_TAG, PICK_TAG = "finesweep.pick_rule", "finesweep.pick"
# `within` forgives the round-off of the subtraction (0.9 - 0.89 is 0.010000000000000009), nothing more.
ROUND_OFF = 1e-9


def search_objectives(search: "SearchConfig") -> tuple[str | list[str], str | list[str]]:
    """OptunaSearch's metric and mode: the metric alone, or [metric, second] with their modes (multi-objective).
    The metric is each trial's best evaluation so far (BEST_SO_FAR): Optuna is told a trial's last result, and a
    trial is worth its best checkpoint, which the export picks from, not its last evaluation."""
    if search.second_objective == "none":
        return BEST_SO_FAR, search.mode
    key, mode = SECOND_OBJECTIVES[search.second_objective]
    return [BEST_SO_FAR, key], [search.mode, mode]


@dataclass(frozen=True)
class TrialPoint:
    """One trial on the speed/quality plane: its best evaluation (and checkpoint) and its throughput."""

    best: Best
    throughput: float

    @property
    def trial_id(self) -> str:
        return self.best.trial_id

    @property
    def value(self) -> float:
        return self.best.value


def trial_points(results, metric: str, mode: str) -> list[TrialPoint]:
    """Each trial with a finite best `metric` and a finite throughput, in the results' order. The best is over
    the trial's kept checkpoints, which always hold its best evaluation (ties to the earlier step, as pick_best);
    the throughput is its last report's."""
    points = []
    for result in results:
        best = pick_best([result], metric, mode)
        throughput = (getattr(result, "metrics", None) or {}).get(THROUGHPUT)
        if best is not None and isinstance(throughput, (int, float)) and math.isfinite(throughput):
            points.append(TrialPoint(best, float(throughput)))
    return points


def _oriented(value: float, mode: str) -> float:
    """Higher is better, whatever the mode."""
    return value if mode == "max" else -value


def dominates(a: TrialPoint, b: TrialPoint, mode: str) -> bool:
    """a is at least as good as b on both objectives and better on one."""
    qa, qb = _oriented(a.value, mode), _oriented(b.value, mode)
    return qa >= qb and a.throughput >= b.throughput and (qa > qb or a.throughput > b.throughput)


def pareto_front(points: list[TrialPoint], mode: str) -> list[TrialPoint]:
    """The trials no other trial dominates, fastest first (two identical points are both on the front)."""
    front = [p for p in points if not any(dominates(q, p, mode) for q in points)]
    return sorted(front, key=lambda p: (-p.throughput, -_oriented(p.value, mode)))


def within(value: float, best: float, tolerance: float, mode: str) -> bool:
    """`value` falls short of `best` by at most `tolerance` (absolute, inclusive)."""
    shortfall = _oriented(best, mode) - _oriented(value, mode)
    return shortfall <= tolerance + ROUND_OFF * max(1.0, abs(best))


def pick_point(points: list[TrialPoint], mode: str, rule: str, tolerance: float) -> TrialPoint | None:
    """The trial `rule` names. best_metric: the best value, ties to the earlier step, then to the earlier trial
    (pick_best's choice). fastest_within: of the trials within `tolerance` of the best value, the fastest; ties to
    the better value, then the earlier step. None without points."""
    if not points:
        return None
    best = min(points, key=lambda p: (-_oriented(p.value, mode), p.best.step))
    if rule == "best_metric":
        return best
    if rule != "fastest_within":
        raise ValueError(f"unknown pick rule {rule!r}; the rules are best_metric and fastest_within")
    eligible = [p for p in points if within(p.value, best.value, tolerance, mode)]
    return min(eligible, key=lambda p: (-p.throughput, -_oriented(p.value, mode), p.best.step))


def rule_text(search: "SearchConfig") -> str:
    """The rule in words, for the console and the parent run's tag."""
    if search.pick == "fastest_within":
        return (f"fastest_within: the fastest trial ({THROUGHPUT}) whose best {search.metric} is within "
                f"{search.pick_tolerance:g} of the best")
    return f"best_metric: the best {search.metric} ({search.mode}) over all evaluations"


def pareto_report(points: list[TrialPoint], front: list[TrialPoint], chosen: TrialPoint | None,
                  search: "SearchConfig") -> dict[str, Any]:
    """What pareto.json holds: every trial's point (front first, fastest first), the front and the pick."""
    on_front = {p.trial_id for p in front}
    ordered = front + sorted((p for p in points if p.trial_id not in on_front), key=lambda p: -p.throughput)

    def row(p: TrialPoint) -> dict[str, Any]:
        return {"trial_id": p.trial_id, search.metric: p.value, "step": p.best.step, THROUGHPUT: p.throughput,
                "on_front": p.trial_id in on_front, "mlflow_run_id": p.best.mlflow_run_id, "params": p.best.params}

    return {"metric": search.metric, "mode": search.mode, "second_objective": search.second_objective,
            "second_metric": THROUGHPUT, "second_mode": "max", "rule": search.pick,
            "tolerance": search.pick_tolerance if search.pick == "fastest_within" else None,
            "rule_text": rule_text(search), "points": [row(p) for p in ordered],
            "front": [p.trial_id for p in front], "pick": row(chosen) if chosen else None}


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
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARETO_FILE).write_text(json.dumps(report, indent=2, default=str))
    tracker.log_json(parent_run_id, report, PARETO_FILE)
    if plot := draw_front(report, out_dir / "plots" / PLOT_FILE, console.warn):
        tracker.log_file(parent_run_id, plot, "plots")
    pick = f"trial {chosen.trial_id} step {chosen.best.step}" if chosen else "none: no trial reported an evaluation"
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
