"""The `finesweep` command. Heavy libraries are imported inside commands so `--help` is instant."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer

from finesweep.search.terminate import stop_cleanly_on_sigterm

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Hyperparameter and batch-size search for fine-tuning open Hugging Face models.")

USER_ERROR_EXIT = 2
# The sweep ran and exported, but a variant of export.quantization could not be made (summary.json's
# export_not_made says which and why): a script that chains finesweep notices.
EXPORT_INCOMPLETE_EXIT = 3
SweepArg = typer.Argument(..., help="A sweep file (YAML), or the folder of a sweep that has run.")
TIME_LIMIT_HELP = ("The whole command's wall time, e.g. 600s, 10m, 1.5h (search.time_limit): the search gets what the "
                   "data, the probe and the export leave. Replaces the file's search.time_budget_minutes.")


@contextmanager
def user_errors() -> Iterator[None]:
    """A user's mistake, or a disk that filled up (search/disk.py), ends in one clear paragraph and exit code 2,
    never a traceback."""
    from finesweep.spaces import SweepFileError

    user_error_types: tuple[type[BaseException], ...] = (SweepFileError,)
    try:
        from finesweep.trainer.data import DataError

        user_error_types += (DataError,)
    except ImportError:
        pass
    try:
        yield
    except user_error_types as error:
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        raise typer.Exit(USER_ERROR_EXIT) from None
    except Exception as error:
        from finesweep.search.disk import full_disk, full_disk_paragraph

        if (full := full_disk(error)) is None:
            raise
        typer.secho(f"error: {full_disk_paragraph(full)}", fg=typer.colors.RED, err=True)
        raise typer.Exit(USER_ERROR_EXIT) from None


QUIET_ENVIRONMENT = {  # set before Ray starts, so trial workers inherit them
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_AIR_NEW_OUTPUT": "0",  # the legacy reporter honours verbose=0; finesweep prints its own progress
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    # Deprecation notices one library gives about another (peft on transformers' renamed attributes), in every
    # probe and trial process: nothing a user of finesweep can act on. --verbose shows them.
    "PYTHONWARNINGS": "ignore::FutureWarning",
    "TQDM_DISABLE": "1",  # library progress bars (transformers' GGUF conversion); finesweep prints each step itself
}


def _quiet_libraries(verbose: bool) -> None:
    if not verbose:
        for name, value in QUIET_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        warnings.simplefilter("ignore", FutureWarning)  # this process read PYTHONWARNINGS before it was set
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("bitsandbytes", "mlflow", "optuna", "alembic"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.ERROR)
    if not verbose:
        from finesweep.search.outputs.logs import quiet_console

        quiet_console()


def _ray_environment(address: str | None) -> None:
    """A local Ray (no --address) listens on 127.0.0.1 only. Ray decides that when it is imported: in its
    single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) GCS, raylet and workers bind loopback, otherwise
    every interface. Joining a cluster needs its cluster mode, so an --address leaves Ray's default."""
    if address is None:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # reachable from this machine only: a token adds nothing
    else:
        from finesweep.search.tuning.ray_cluster import check_reachable

        check_reachable(address)  # before data and probe, which take minutes


def _load(sweep_file: Path):
    from finesweep.spaces import load

    return load(sweep_file)


@app.command()
def run(
    sweep_file: Path = typer.Argument(..., help="The sweep file (YAML)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster to join (e.g. 10.0.0.5:6379 or auto); default: a local Ray."),
    tracking_uri: Optional[str] = typer.Option(None, help="MLflow tracking URI (e.g. http://127.0.0.1:5000); overrides the sweep file."),
    time_limit: Optional[str] = typer.Option(None, "--time-limit", help=TIME_LIMIT_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs."),
) -> None:
    """Prepare data, probe memory, run the trials, pick the best checkpoint, quantize and export it."""
    _quiet_libraries(verbose)
    with stop_cleanly_on_sigterm(sweep_file):
        with user_errors():
            _ray_environment(address)
            config = _with_time_limit(_load(sweep_file), time_limit)
            from finesweep.search.measure import process_started
            from finesweep.search.sweep import run as run_sweep

            # The process's start, read from the system: when it is read does not move it.
            summary = run_sweep(config, address=address, tracking_uri=tracking_uri, started=process_started())
        _exit_for(summary)


DASHBOARD_HELP = "The Ray cluster's dashboard, where its Jobs API listens (e.g. http://10.0.0.5:8265)."


@app.command()
def submit(
    sweep_file: Path = typer.Argument(..., help="The sweep file (YAML), on storage the cluster's head reads at the same path."),
    address: str = typer.Option(..., help=DASHBOARD_HELP),
    tracking_uri: Optional[str] = typer.Option(None, help="MLflow tracking URI the sweep logs to (a server every node reaches)."),
    time_limit: Optional[str] = typer.Option(None, "--time-limit", help=TIME_LIMIT_HELP),
) -> None:
    """Run the sweep as a Ray job on a cluster, driver included, and return: follow it with status, logs and stop."""
    with user_errors():
        config = _with_time_limit(_load(sweep_file), time_limit)  # every error of the file before anything is sent
        from finesweep.search import jobs

        options = [*(["--tracking-uri", tracking_uri] if tracking_uri else []),
                   *(["--time-limit", time_limit] if time_limit else [])]
        job = jobs.submit(config, sweep_file, address, options)
    typer.echo(f"submitted sweep {job.name} as Ray job {job.job_id}; its folder on the cluster: {job.folder}\n"
               f"  finesweep status {job.name} --address {address}\n"
               f"  finesweep logs {job.name} --address {address} --follow\n"
               f"  finesweep stop {job.name} --address {address}")


@app.command()
def logs(sweep: str = typer.Argument(..., help="The submitted sweep's name (or its job id)."),
         address: str = typer.Option(..., help=DASHBOARD_HELP),
         follow: bool = typer.Option(False, "--follow", "-f", help="Go on printing until the sweep ends.")) -> None:
    """The console of a submitted sweep, as `run` prints it."""
    with user_errors():
        from finesweep.search import jobs

        job = jobs.find(address, sweep)
        if not follow:
            typer.echo(jobs.logs(address, job), nl=False)
            return
        jobs.follow(address, job, lambda chunk: typer.echo(chunk, nl=False))


@app.command()
def stop(sweep: str = typer.Argument(..., help="The submitted sweep's name (or its job id)."),
         address: str = typer.Option(..., help=DASHBOARD_HELP)) -> None:
    """Stop a submitted sweep: its driver ends as `run` does on SIGTERM (trials stopped, resumable)."""
    with user_errors():
        from finesweep.search import jobs

        job = jobs.find(address, sweep)
        stopped = jobs.stop(address, job)
    typer.echo(f"sweep {job.name} (job {job.job_id}): " + ("stopping" if stopped else f"already {job.status.lower()}"))


def _with_time_limit(config, time_limit: str | None):
    """The sweep file's config bounded by --time-limit, which replaces its search.time_budget_minutes."""
    if time_limit is None:
        return config
    from finesweep.spaces import SweepConfig, SweepFileError, parse_duration

    try:
        parse_duration(time_limit)
    except ValueError as error:
        raise SweepFileError(f"--time-limit: {error}") from None
    dumped = config.model_dump(mode="json")
    search = {**dumped["search"], "time_limit": time_limit, "time_budget_minutes": None}
    return SweepConfig.model_validate({**dumped, "search": search})


def _exit_for(summary: dict) -> None:
    """0: exported in full; 1: no trial reported an evaluation; 3: exported without a variant asked for."""
    if summary.get("best") is None:
        raise typer.Exit(1)
    if summary.get("export_not_made"):
        raise typer.Exit(EXPORT_INCOMPLETE_EXIT)


@app.command()
def data(sweep_file: Path = typer.Argument(..., help="The sweep file (YAML)."),
         verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Prepare and validate the data, print the report, and stop."""
    _quiet_libraries(verbose)
    with user_errors():
        config = _load(sweep_file)
        from finesweep.search.outputs.console import Console
        from finesweep.search.inputs import prepare_data, sweep_folder, tokenizer_candidates

        # A GGUF candidate's tokenizer is read from the file: the data is checked without dequantizing anything.
        prepare_data(tokenizer_candidates(config), sweep_folder(config), Console())


@app.command()
def probe(sweep_file: Path = typer.Argument(..., help="The sweep file (YAML)."),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the memory probe alone and print its table."""
    _quiet_libraries(verbose)
    with user_errors():
        config = _load(sweep_file)
        from finesweep.search import inputs, measure
        from finesweep.search.outputs.console import Console
        from finesweep.search.outputs.logs import log_to_file
        from finesweep.search.probe.device import resolve_device, usable_precisions

        console, folder = Console(), inputs.sweep_folder(config)
        # Data, tokens and lengths before a GGUF candidate is dequantized: their errors in seconds.
        prepared = inputs.prepare_data(inputs.tokenizer_candidates(config), folder, console)
        log_to_file(folder.log_file)  # the libraries' warnings, the probe process's included, go there
        config = inputs.dequantize_gguf(config, console)
        device = resolve_device(use_gpu=config.resources.gpus_per_trial != 0)
        precisions = usable_precisions([p.value for p in config.space.precision], device)
        measure.measure_memory(config, folder, device, precisions, prepared, console)


@app.command()
def plan(sweep_file: Path = typer.Argument(..., help="The sweep file (YAML)."),
         address: Optional[str] = typer.Option(None, help="The Ray cluster `run` will join: the plan then counts on "
                                                          "max_concurrent_trials at once instead of this machine's cores."),
         time_limit: Optional[str] = typer.Option(None, "--time-limit", help=TIME_LIMIT_HELP),
         verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Prepare the data, probe memory and speed, and print how the search will spend its budget, without training.

    The plan names the trial length, the trials and the predicted end; `run` prints the same plan, then follows it."""
    _quiet_libraries(verbose)
    with user_errors():
        config = _with_time_limit(_load(sweep_file), time_limit)
        from finesweep.search import inputs, measure
        from finesweep.search.outputs.console import Console

        measured = measure.measure_inputs(config, inputs.sweep_folder(config), Console(), measure.process_started(),
                                          address=address)
        if not measure.plan_trials(measured, address).combinations:
            typer.secho("no plan: the probe measured no combination that trains", fg=typer.colors.RED, err=True)
            raise typer.Exit(1)


@app.command()
def schema(markdown: bool = typer.Option(False, "--markdown", help="Print the reference table (as in docs/sweep-file.md) instead.")) -> None:
    """Print the JSON Schema of the sweep file (point your editor's YAML support at it)."""
    if markdown:
        from finesweep.spaces.reference import markdown_reference

        typer.echo(markdown_reference(), nl=False)
        return
    from finesweep.spaces import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


def _sweep_root(sweep: Path) -> Path:
    """The folder of a sweep given as its folder or its sweep file; it must have started once."""
    from finesweep.search.inputs import sweep_folder
    from finesweep.spaces import SweepFileError

    root = sweep.resolve() if sweep.is_dir() else sweep_folder(_load(sweep)).root
    if not (root / "sweep-state.json").is_file():
        raise SweepFileError(f"{root}: no sweep has run here yet (no sweep-state.json). Run `finesweep run <sweep.yaml>` first.")
    return root


def _store_of(sweep: Path, tracking_uri: str | None) -> tuple[str, dict]:
    """The tracking URI and saved state of a sweep given as its file or its folder."""
    from finesweep.search.sweep import read_state

    state = read_state(_sweep_root(sweep))
    return tracking_uri or state["tracking_uri"], state


@app.command()
def resume(sweep: Path = SweepArg,
           address: Optional[str] = typer.Option(None, help="Ray cluster to join; default: a local Ray."),
           verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs.")) -> None:
    """Continue an interrupted sweep: finished trials stay, unfinished ones go on from their last checkpoint."""
    _quiet_libraries(verbose)
    with stop_cleanly_on_sigterm(sweep):
        with user_errors():
            _ray_environment(address)
            root = _sweep_root(sweep)
            from finesweep.search.sweep import resume as resume_sweep

            summary = resume_sweep(root, address=address)
        _exit_for(summary)


def _reachable_run(tracker, run_id: str):
    """The run, after the tracker's retries; a server that stays down is the user's to start, not a traceback."""
    from finesweep.search.tracking.client import TrackingUnavailable
    from finesweep.spaces import SweepFileError

    try:
        return tracker.call(lambda: tracker.client.get_run(run_id))
    except TrackingUnavailable as error:
        raise SweepFileError(f"{error}. Start the tracking server (see mlflow/README.md) or name another store "
                             "with --tracking-uri.") from None


@app.command()
def status(sweep: Path = SweepArg, tracking_uri: Optional[str] = typer.Option(None),
           metric: str = typer.Option("", help="Metric to rank by; default: the sweep's."),
           mode: str = typer.Option("", help="min or max; default: the way --metric is better, else the sweep's."),
           address: Optional[str] = typer.Option(None, help="For a submitted sweep (then SWEEP is its name): " + DASHBOARD_HELP),
           ) -> None:
    """Leaderboard of the sweep's trials, read from the tracking store; for a submitted sweep, its job's state first."""
    _quiet_libraries(False)
    with user_errors():
        if address is not None:
            sweep = _submitted_folder(str(sweep), address)
            if sweep is None:
                return
        uri, state = _store_of(sweep, tracking_uri)
        from finesweep.search.outputs.console import Console, leaderboard_table
        from finesweep.search.tracking.client import Tracker
        from finesweep.search.tracking.tags import BEST_RUN_TAG, BEST_STEP_TAG
        from finesweep.spaces.search_config import METRIC_MODES

        tracker = Tracker(uri)
        parent = _reachable_run(tracker, state["parent_run_id"])
        mode = mode or (METRIC_MODES.get(metric) if metric else None) or parent.data.params.get("search.mode", "min")
        metric = metric or parent.data.params.get("search.metric", "eval_loss")
        Console().out.print(leaderboard_table(tracker, state["experiment_id"], state["parent_run_id"], metric, mode))
        tags = parent.data.tags
        if BEST_RUN_TAG in tags:  # by its run's name, as the leaderboard shows it (a continuation's: exploit-...)
            typer.echo(f"best: {_reachable_run(tracker, tags[BEST_RUN_TAG]).info.run_name} at step "
                       f"{tags.get(BEST_STEP_TAG)}")


app.command(name="best", help="Same as status: the leaderboard, best first.")(status)


def _submitted_folder(name: str, address: str) -> Path | None:
    """A submitted sweep's job state, printed; its folder where this machine sees it and it has started (the
    leaderboard follows), else None."""
    from finesweep.search import jobs

    job = jobs.find(address, name)
    typer.echo(f"sweep {job.name}: Ray job {job.job_id} {job.status.lower()}" + (f" ({job.message})" if job.message else ""))
    folder = Path(job.folder)
    if (folder / "sweep-state.json").is_file():
        return folder
    typer.echo(f"  its folder {job.folder} " + ("holds no started sweep yet" if folder.is_dir() else
                                                "is not on this machine: mount the cluster's storage here to read it"))
    return None


@app.command()
def sync(sweep: Path = SweepArg,
         tracking_uri: Optional[str] = typer.Option(None, help="Replay to this store instead of the sweep's.")) -> None:
    """Replay the tracking writes a sweep kept on disk while the MLflow server was down (safe to run again)."""
    _quiet_libraries(False)
    with user_errors():
        uri, state = _store_of(sweep, tracking_uri)
    from finesweep.search.tracking.spool import SPOOL_FOLDER, Spool
    from finesweep.search.tracking.sync import remap_sweep_files, replay
    from finesweep.search.tracking.client import TrackingUnavailable

    root = Path(state["root"])
    spool = Spool(root / SPOOL_FOLDER)
    pending = spool.pending()
    if not pending:
        typer.echo(f"nothing to replay: {spool.folder} holds no tracking writes that wait for {uri}")
        return
    typer.echo(f"replaying {pending} tracking writes from {spool.folder} to {uri}")
    try:
        report = replay(spool.folder, uri)
    except TrackingUnavailable as error:
        typer.secho(f"error: {error}. {spool.pending()} writes still wait in {spool.folder}; start the server (or pass "
                    "--tracking-uri) and run `finesweep sync` again: what was replayed is not replayed twice.",
                    fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    for op, count in sorted(report.replayed.items()):
        typer.echo(f"  {op}: {count}")
    for placeholder, real in report.created.items():
        typer.echo(f"  created {real} (was {placeholder})")
    for name in remap_sweep_files(root, spool.ids()):
        typer.echo(f"  {name}: placeholder ids replaced by the server's")
    for line in report.skipped:
        typer.secho(f"  skipped {line}", fg=typer.colors.YELLOW, err=True)
    skipped = f", skipped {len(report.skipped)} that the server refused" if report.skipped else ""
    typer.echo(f"replayed {sum(report.replayed.values())} writes{skipped}")
    if report.skipped:
        raise typer.Exit(1)


@app.command()
def ui(sweep: Path = SweepArg, port: int = typer.Option(5000, help="Port of the UI."),
       host: str = typer.Option("127.0.0.1", help="Address to bind; 127.0.0.1 keeps it private to this machine."),
       tracking_uri: Optional[str] = typer.Option(None)) -> None:
    """Start the MLflow UI on the sweep's tracking store and print the sweep's address."""
    with user_errors():
        uri, state = _store_of(sweep, tracking_uri)
    # The runs table: MLflow 3 opens an experiment on its GenAI overview page otherwise.
    typer.echo(f"MLflow UI: http://{host}:{port}/#/experiments/{state['experiment_id']}/runs  (Ctrl+C stops it)")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    sys.stdout.flush()
    # Become the UI process, so stopping `finesweep ui` (Ctrl+C, SIGTERM) stops the server too.
    os.execv(sys.executable, command)


@app.command(name="export")
def export_command(sweep: Path = SweepArg,
                   quantize: str = typer.Option("", help="Comma-separated variants as export.quantization names them (int8, nf4, onnx-int8, ...: `finesweep schema --markdown` lists all); default: the sweep file's."),
                   out: Optional[Path] = typer.Option(None, help="Export folder (default: the sweep file's)."),
                   verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Export a finished sweep's best checkpoint again: other quantizations, another folder."""
    _quiet_libraries(verbose)
    with user_errors():
        root = _sweep_root(sweep)
        from finesweep.search.sweep import reexport

        from finesweep.spaces import Quantization, SweepFileError

        methods = [m.strip() for m in quantize.split(",") if m.strip()] or None
        unknown = [m for m in methods or [] if m not in {q.value for q in Quantization}]
        if unknown:
            raise SweepFileError(f"--quantize: {', '.join(unknown)} is not a quantization finesweep makes; "
                                 f"choose from {', '.join(q.value for q in Quantization)}, e.g. --quantize nf4,int8.")
        try:
            exported = reexport(root, methods, out)
        except FileNotFoundError as error:
            raise SweepFileError(f"{error}. Run the sweep to the end first (`finesweep run` or `finesweep resume`).") from None
    if exported.not_made:
        raise typer.Exit(EXPORT_INCOMPLETE_EXIT)


@app.command()
def predict(export_dir: Path = typer.Argument(..., help="An exported model folder (e.g. runs/<sweep>/export/model)."),
            texts: list[str] = typer.Argument(..., help="Texts (classification) or prompts (causal LM)."),
            pairs: list[str] = typer.Option(None, "--pair", help="Each text's second text, in order (a classifier of "
                                            "text pairs: data.text_pair_column).")) -> None:
    """Run an exported model on a few texts (a smoke test of the export)."""
    _quiet_libraries(False)
    with user_errors():
        from finesweep.trainer.serving.predict import predict as run_predict, shown_inputs

        for text, answer in zip(shown_inputs(texts, pairs), run_predict(export_dir, texts, pairs or None)):
            typer.echo(f"{text} -> {json.dumps(answer)}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
