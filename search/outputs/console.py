"""What the user sees in the terminal: the data report, the probe table, trials as they run, the leaderboard."""

from __future__ import annotations

import math
import sys
from typing import Any

from rich.console import Console as RichConsole
from rich.table import Table
from rich.text import Text

from finesweep.search.budget.limit import unused_words
from finesweep.search.selection.best import EQUAL_TIME_TRIAL
from finesweep.search.tracking.tags import END_STATE_TAG


class Console:
    """The sweep's terminal output (rich), one method per moment of the sweep."""

    def __init__(self, rich_console: RichConsole | None = None):
        # Piped output (CI logs, `| tee`) gets a wide fixed width instead of 80 columns of wrapped tables. No markup:
        # the console prints the user's data, paths and the CPU's flags ("[avx2 avx512f]"), which rich would take
        # for tags, hiding them, or end the sweep on (a data row's "[/b]" is a MarkupError).
        width = None if sys.stdout.isatty() else 150
        self.out = rich_console or RichConsole(highlight=False, markup=False, width=width)

    def print(self, text: str) -> None:
        """A line as it is written, never read as markup (whatever console the caller gave)."""
        self.out.print(text, markup=False)

    def step(self, text: str) -> None:
        self.out.print(Text.assemble((">>", "bold cyan"), " ", text))

    def warn(self, text: str) -> None:
        self.out.print(Text.assemble(("warning:", "bold yellow"), " ", text))

    def header(self, config, device, folder) -> None:
        self.out.rule(f"finesweep: {config.name}")
        self.print(f"device {device.kind} ({device.name}); sweep folder {folder}")
        self.step("Preparing data")

    def data_report(self, report) -> None:
        self.print(report.render())

    def lengths(self, lengths: dict[str, dict[str, float]], max_seq_len: int) -> None:
        covered = min(v["p99"] for v in lengths.values()) if lengths else 0
        self.print(f"max_seq_len {max_seq_len} (p99 of the training texts: {covered:.0f} tokens)")

    def probe_table(self, results: dict[str, Any]) -> None:
        margin = next(iter(results.values())).margin if results else 0
        table = Table("model", "precision", "method", "seq", "recompute", "max micro", "used", "eval",
                      "peak / budget at max", "samples/s", "other plan", "steps (attempts)", "seconds",
                      title=f"Memory probe: fits when peak x {1 + margin:.2f} <= budget; trials train at 'used' "
                            "(resources.micro_batch), recomputing activations where 'recompute' says so")
        for r in results.values():
            peak = (r.attempt_at(r.max_micro_batch) or {}).get("peak_bytes", 0)
            table.add_row(r.model, r.precision, r.method, str(r.seq_len), "yes" if r.gradient_checkpointing else "no",
                          _max_micro(r), str(r.micro_batch),
                          str(r.eval_batch_size),
                          f"{peak / 2**30:.2f} / {r.budget_bytes / 2**30:.2f} GiB", f"{r.samples_per_second:.1f}",
                          _other_plan(r.alternative), f"{r.probe_steps} ({len(r.attempts)})",
                          "cached" if r.reused else f"as {r.same_as}" if r.same_as else f"{r.seconds:.1f}")
        self.out.print(table)

    def plan(self, plan, elapsed: float) -> None:
        """The search planned from the probe's speeds: per combination its costs, then the decisions and the
        predicted end (`elapsed`: the command's seconds so far)."""
        import time

        periods = f"{plan.evaluations} evaluation{'' if plan.evaluations == 1 else 's'}"
        length = (f"{periods} of {plan.period_seconds:.0f} s per trial" if plan.period_seconds
                  else f"{plan.max_steps} steps per trial, an evaluation every {plan.eval_every_steps}")
        table = Table("model | precision | method", "samples/s", "s / step", "s / evaluation", "steps / trial",
                      "s / trial", title=f"Plan: {length}, {plan.num_trials} trials, {plan.concurrency} at once; "
                                         f"budget: {plan.budget} (steps at the mean effective batch)")
        for times in plan.combinations:
            table.add_row(times.key.replace("|", " | "), f"{times.samples_per_second:.1f}",
                          f"{times.seconds_per_step:.2f}", f"{times.seconds_per_evaluation:.1f}",
                          str(plan.trial_steps(times)), f"{plan.trial_seconds(times):.0f}")
        self.out.print(table)
        for note in plan.notes:
            self.print(f"  plan: {note}")
        run = plan.simulated
        end = time.strftime("%H:%M:%S", time.localtime(time.time() + plan.predicted_seconds))
        self.print(f"  predicted: {run.started} trials start ({run.completed} to full length, {run.stopped_early} "
                       f"stopped by ASHA, {run.cut_by_budget} by the budget); search {plan.search_seconds:.0f} s{_split(plan)}, "
                       + (f"the baseline at equal time up to {plan.equal_time_seconds:.0f} s, "
                          if plan.equal_time_seconds else "")
                       + f"export {plan.export_seconds:.0f} s; ends about {end} "
                       f"({elapsed + plan.predicted_seconds:.0f} s after the start)")

    def search_start(self, algorithm: str, scheduler: str, plateau_patience: int | None) -> None:
        ends = (["by ASHA"] if scheduler == "asha" else []) + (
            [f"after {plateau_patience} evaluations in a row without a better one (search.plateau_patience)"]
            if plateau_patience else [])
        stopping = f", stopped early {' or '.join(ends)}" if ends else ""
        self.step(f"Searching: Ray Tune trials sampled by Optuna ({algorithm}){stopping}")

    def trial_event(self, metric: str) -> "TrialEventPrinter":
        """A callback for the Tune callback: one line per evaluation and per trial end."""
        return TrialEventPrinter(metric)

    def leaderboard(self, tracker, experiment_id: str, parent_run_id: str, metric: str, mode: str) -> None:
        self.out.print(leaderboard_table(tracker, experiment_id, parent_run_id, metric, mode))

    def compared(self, evaluated: int, started: int, baseline: bool) -> None:
        """How many configurations the search compared: the trials that evaluated at least once."""
        among = ", the baseline recipe among them" if baseline else ""
        unevaluated = (f"; {started - evaluated} more started and ended before their first evaluation"
                       if started > evaluated else "")
        self.print(f"The search compared {evaluated} configuration{'' if evaluated == 1 else 's'}, each evaluated at "
                   f"least once{among}{unevaluated}.")

    def pareto(self, report: dict[str, Any]) -> None:
        """The speed/quality front (search.second_objective) and the trial the stated rule exports."""
        metric, speed, pick = report["metric"], report["second_metric"], report["pick"] or {}
        table = Table("trial", "model", "precision", "lr", "eff. batch", f"best {metric}", "at step", "tokens/s",
                      "", title=f"Pareto front: best {metric} ({report['mode']}) against training tokens/s (max)")
        for p in (p for p in report["points"] if p["on_front"]):
            c = p["params"]
            table.add_row(p["trial_id"], str(c.get("model", "")), str(c.get("precision", "")),
                          _fmt(c.get("learning_rate")), str(c.get("effective_batch_size", "")), _fmt(p[metric]),
                          str(p["step"]), f"{p[speed]:.1f}", "exported" if p["trial_id"] == pick.get("trial_id") else "")
        self.out.print(table)
        off = len(report["points"]) - len(report["front"])
        self.print(f"{len(report['front'])} of {len(report['points'])} trials on the front ({off} dominated). "
                       f"Rule {report['rule_text']}.")
        if pick:
            self.step(f"Pick: trial {pick['trial_id']} at step {pick['step']} ({metric} {_fmt(pick[metric])}, "
                      f"{pick[speed]:.1f} tokens/s)")

    def export_table(self, result) -> None:
        generated = any("gen_rouge_l" in m for m in result.metrics.values())  # causal_lm with generation_samples
        decoded = any("ms_per_generated_token" in m for m in result.metrics.values())  # causal_lm
        columns = ["variant", "accuracy / perplexity", "loss", "size MB", "ms/sample batch 1", "batch 32"] + (
            ["ms/token generated"] if decoded else []) + (["ROUGE-L"] if generated else [])
        table = Table(*columns, title=Text(f"Test split ({result.folder})"))
        for variant, m in result.metrics.items():
            primary = m.get("accuracy", m.get("perplexity"))
            table.add_row(variant, _fmt(primary), _fmt(m.get("loss")), f"{m.get('size_bytes', 0) / 1e6:.1f}",
                          _timed(m, "latency_ms_batch1", "speedup_batch1"),
                          _timed(m, "ms_per_sample_batch32", "speedup_batch32"),
                          *([_timed(m, "ms_per_generated_token", "speedup_decode")] if decoded else []),
                          *([_fmt(m.get("gen_rouge_l"))] if generated else []))
        self.out.print(table)
        for warning in result.warnings:
            self.warn(warning)

    def done(self, summary: dict[str, Any], tracking_uri: str, experiment_id: str) -> None:
        self.out.rule("done")
        phases = ", ".join(f"{phase} {seconds:g} s" for phase, seconds in (summary.get("phase_seconds") or {}).items())
        limit = (summary.get("plan") or {}).get("time_limit_seconds")
        within = f" of the {limit:g} s limit" if limit else ""
        self.print(f"wall time {summary.get('wall_seconds')} s{within} ({phases}); export: {summary.get('export_dir')}")
        if unused := unused_words(summary.get("plan") or {}, summary.get("phase_seconds") or {},
                                  summary.get("wall_seconds") or 0.0):
            self.print(unused)
        self.print(f"MLflow store {tracking_uri} (experiment {experiment_id}); open it with: finesweep ui")


class TrialEventPrinter:
    """Prints one line per evaluation and per trial end. Picklable: Tune saves it with the experiment, and a
    resumed sweep prints through the restored copy."""

    def __init__(self, metric: str):
        self.metric = metric
        self._console: Console | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"metric": self.metric, "_console": None}

    def __call__(self, kind: str, trial, result: dict) -> None:
        if self._console is None:
            self._console = Console()
        # The trial's name (Tune's str of it), as the leaderboard and MLflow show it: trial-<id> for the search's,
        # exploit-<source> for a continuation, whose Tune id names nothing a user can look up.
        if kind == "end":
            self._console.print(f"  {trial} ended: {result.get('state')}")
            return
        c = trial.config
        shown = dict.fromkeys([self.metric, "eval_loss", "eval_accuracy"])
        values = " ".join(f"{k}={_fmt(result[k])}" for k in shown if k in result)
        dropout = f" dropout={c['dropout']:.2f}" if c.get("dropout") is not None else ""
        self._console.print(
            f"  {trial} {c.get('model')} {c.get('precision')} {_method(c)} "
            f"lr={c.get('learning_rate', 0):.2e} batch={c.get('effective_batch_size')}{dropout}: step {result.get('step')} "
            f"{values}")


def _method(config: dict[str, Any]) -> str:
    """full, or lora/qlora with its rank: what the trial trains."""
    method = config.get("method") or "full"
    return method if method == "full" else f"{method} r={config.get('lora_r')}"


BASELINE_MARK = "*"  # beside the baseline trial's name in the leaderboard, explained in its caption


def leaderboard_table(tracker, experiment_id: str, parent_run_id: str, metric: str, mode: str) -> Table:
    """Trials of one sweep, best first, read back from the tracking store."""
    rows = []
    for run in tracker.trial_runs(experiment_id, parent_run_id):
        history = tracker.metric_history(run.info.run_id, metric)
        best = (max if mode == "max" else min)(history, key=lambda m: m.value) if history else None
        rows.append((run, best))
    sign = -1 if mode == "max" else 1
    rows.sort(key=lambda r: sign * r[1].value if r[1] else math.inf)
    table = Table("trial", "model", "precision", "method", "lr", "eff. batch", "micro x accum", f"best {metric}", "at step",
                  "end state", title="Trials")
    for run, best in rows:
        p, tags = run.data.params, run.data.tags
        name = run.info.run_name + (f" {BASELINE_MARK}" if _is_baseline(run) else "")
        table.add_row(name, p.get("model", ""), p.get("precision", ""), _method(p),
                      _fmt(float(p["learning_rate"])) if "learning_rate" in p else "",
                      p.get("effective_batch_size", ""), f"{p.get('micro_batch', '')} x {p.get('gradient_accumulation', '')}",
                      _fmt(best.value) if best else "-", str(best.step) if best else "-", tags.get(END_STATE_TAG, run.info.status))
    if any(_is_baseline(run) for run, _ in rows):
        table.caption = f"{BASELINE_MARK} the baseline: the recipe a user would run without finesweep (search.baseline)"
    return table


def _is_baseline(run) -> bool:
    """The trial logged the param `baseline` True (TrialPlan.baseline, search.baseline), or is the baseline recipe
    trained again for the export's seconds (search.baseline.budget: equal)."""
    return run.data.params.get("baseline") == "True" or run.info.run_name == EQUAL_TIME_TRIAL


def _split(plan) -> str:
    """The search's seconds divided between the trials and the winner's further training, when it has any."""
    if not plan.exploitation_seconds:
        return ""
    return (f" ({plan.search_seconds - plan.exploitation_seconds:.0f} s of trials, then "
            f"{plan.exploitation_seconds:.0f} s for the winner)")


def _other_plan(plan: dict[str, Any] | None) -> str:
    """The plan the probe measured and did not choose (gradient checkpointing on or off), in a cell."""
    if not plan:
        return "-"
    recompute = "recompute" if plan["gradient_checkpointing"] else "no recompute"
    return f"{recompute}: micro {plan['micro_batch']}, {plan['samples_per_second']:.1f}/s"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 else f"{value:.4f}"
    return str(value)


def _timed(metrics: dict[str, float], key: str, speedup: str) -> str:
    """A speed cell: milliseconds per sample, and the speed-up over full precision when there is one."""
    if metrics.get(key) is None:
        return "-"
    return f"{metrics[key]:.2f}" + (f" ({metrics[speedup]:.2f}x)" if metrics.get(speedup) else "")


def _max_micro(result) -> str:
    """The probe table's max micro-batch, with why the probe stopped short of the largest that fits."""
    if result.not_measured:
        return "- (not measured: time limit)"
    if result.measured_as:  # steer.stand_ins: this row's figures are another precision's
        return f"{result.max_micro_batch} ({result.measured_as}'s: not measured, time limit)"
    why = " (stopped: too slow)" if result.too_slow else " (stopped: time limit)" if result.cut_short else ""
    return f"{result.max_micro_batch}{why}"
