"""MLflow, explicitly: every call names its run; the tracking URI and run ids are passed, never implied.

Nothing is lost when the tracking server is down: every call is retried with backoff (RetryPolicy); a write
that still fails goes to the sweep's spool on disk (spool.py) and the sweep goes on; `finesweep sync`
replays the spool once the server is back. Reads the controller needs degrade to "unknown" with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from finesweep.search.tracking.spool import Spool, new_placeholder
from finesweep.search.tracking.tags import END_STATE_TAG, PARENT_TAG, SPOOL_ID_TAG, TRIAL_TAG

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_PARAM_LENGTH = 500
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
RETRY_ENV = "FINESWEEP_TRACKING_RETRY_S"

# finesweep retries every call it makes (RetryPolicy); MLflow's HTTP client would retry each attempt again
# (7 times with backoff 2 by default, about 4 minutes), so the two would multiply into many minutes per call
# while the server is down. One layer retries. The timeout stays MLflow's (120 s): the same client uploads the
# exported models to the registry, and a team server writing a large upload to its artifact store may take long.
# MLflow's client also prints a run's URL after every set_terminated, fetching the run for it: one more request per
# call, and a wall of links from `finesweep sync`. Set only where unset: a user's own settings win.
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "120",
                        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


@dataclass(frozen=True)
class RetryPolicy:
    """How long one tracking call keeps trying before a write goes to the spool (the one place to tune it)."""

    attempts: int = 5
    budget_s: float = 30.0  # time one call may spend, attempts and waits together; waits double from budget/16

    @classmethod
    def from_env(cls) -> "RetryPolicy":
        """The default, or FINESWEEP_TRACKING_RETRY_S seconds of budget (tests set it small)."""
        raw = os.environ.get(RETRY_ENV)
        if raw is None:
            return cls()
        try:
            budget = float(raw)
        except ValueError:
            budget = -1.0
        if budget < 0:
            raise ValueError(f"{RETRY_ENV}: must be a number of seconds >= 0, but got {raw!r}. "
                             f"Set it to e.g. 30, or unset it for the default ({cls.budget_s:g}).")
        return cls(budget_s=budget)

    def wait(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (0-based)."""
        return self.budget_s * 2 ** attempt / 2 ** (self.attempts - 1)

    @property
    def cooldown_s(self) -> float:
        """After a call gave up, the process sends nothing for this long (writes spool at once), then probes once."""
        return self.budget_s


class TrackingUnavailable(RuntimeError):
    """The tracking store did not answer within the retry policy."""


# Per process and URI: until when the server counts as down (so a trial does not wait out the retry budget at
# every evaluation while it is), and whether the process already said so.
_DOWN_UNTIL: dict[str, float] = {}
_WARNED: set[str] = set()


def default_tracking_uri(sweep_dir: Path) -> str:
    """The embedded default: a SQLite store inside the sweep folder."""
    return f"sqlite:///{(sweep_dir / 'mlflow.db').resolve()}"


def is_transient(error: BaseException) -> bool:
    """Whether trying again later may succeed: no answer, a timeout, a server error, rate limiting. A request the
    server refused (a bad value, a deleted run) fails the same way again, and is raised as before."""
    from mlflow.exceptions import MlflowException

    if isinstance(error, MlflowException):
        status = error.get_http_status_code()
        return status >= 500 or status == 429
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status == 429
    # No connection or no answer; not a local file that is missing (that fails the same way every time).
    package = type(error).__module__.split(".")[0]
    return (isinstance(error, (ConnectionError, TimeoutError)) or package in {"urllib3", "requests"}
            or (package == "sqlalchemy" and type(error).__name__ == "OperationalError"))  # e.g. database is locked


class Tracker:
    """A thin, explicit wrapper over MlflowClient for the sweep and its trials; with a spool folder, writes that
    cannot reach the server are kept there instead of failing the caller."""

    def __init__(self, uri: str, spool_dir: Path | str | None = None, policy: RetryPolicy | None = None):
        from mlflow import MlflowClient

        if uri.startswith(("http://", "https://")):
            for name, value in MLFLOW_HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.uri = uri
        self.client: MlflowClient = MlflowClient(tracking_uri=uri)
        self.policy = policy or RetryPolicy.from_env()
        self.spool = Spool(spool_dir) if spool_dir else None

    # -- the retrying call ----------------------------------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` with retries and backoff; raises TrackingUnavailable when the server stays unreachable."""
        started = time.monotonic()
        down_until = _DOWN_UNTIL.get(self.uri)
        if down_until is not None and started < down_until:
            raise TrackingUnavailable(f"the tracking server at {self.uri} is not answering (retrying later)")
        attempts = 1 if down_until is not None else max(1, self.policy.attempts)  # after a cool-down: one probe
        for attempt in range(attempts):
            try:
                result = fn()
            except Exception as error:
                if not is_transient(error):
                    raise
                last = error
                wait = self.policy.wait(attempt)
                if attempt + 1 == attempts or time.monotonic() - started + wait > self.policy.budget_s:
                    break
                time.sleep(wait)
            else:
                _DOWN_UNTIL.pop(self.uri, None)
                return result
        _DOWN_UNTIL[self.uri] = time.monotonic() + self.policy.cooldown_s
        raise TrackingUnavailable(f"the tracking server at {self.uri} did not answer within "
                                  f"{time.monotonic() - started:.0f} s: {type(last).__name__}: {last}") from last

    def _offline(self, error: TrackingUnavailable) -> None:
        if self.spool is None:
            raise error
        if str(self.spool.folder) not in _WARNED:
            _WARNED.add(str(self.spool.folder))
            log.warning("%s; the sweep goes on and keeps its tracking writes in %s (replay them with `finesweep "
                        "sync`)", error, self.spool.folder)

    def _write(self, op: str, args: dict[str, Any]) -> None:
        """Send one write, or keep it in the spool: when the server does not answer, and when its run already
        has writes waiting there (so that the run's writes replay in the order they were made)."""
        if self.spool is not None:
            if self.spool.must_queue(args):
                self.spool.append(op, args)  # as given: sync maps placeholders when it gets there
                return
            args = self.spool.resolve(args)  # ids from Tune's results may be placeholders that a sync created
        try:
            self.call(lambda: apply_op(self.client, op, args))
        except TrackingUnavailable as error:
            self._offline(error)
            self.spool.append(op, args)

    # -- writes ---------------------------------------------------------------------------------------------

    def experiment(self, name: str, artifact_location: Path | None) -> str:
        """The experiment's id, created on first use; a local store keeps artifacts beside it."""
        location = artifact_location.resolve().as_uri() if artifact_location and self.uri.startswith("sqlite") else None
        args = {"name": name, "artifact_location": location}
        try:
            return self.call(lambda: apply_op(self.client, "create_experiment", args))
        except TrackingUnavailable as error:
            self._offline(error)
        placeholder = new_placeholder("experiment")
        self.spool.append("create_experiment", {**args, "placeholder": placeholder})
        return placeholder

    def start_run(self, experiment_id: str, name: str, tags: dict[str, str] | None = None,
                  parent_run_id: str | None = None) -> str:
        """A new run's id: the server's, or a placeholder that sync maps to the real one."""
        tags = dict(tags or {})
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        args = {"experiment_id": experiment_id, "run_name": name, "tags": tags, "start_time": _now_ms()}
        run_id = None
        if self.spool is not None:
            args = self.spool.resolve(args)
        if self.spool is None or not self.spool.unresolved(args):
            try:
                run_id = self.call(lambda: apply_op(self.client, "create_run", args))
            except TrackingUnavailable as error:
                self._offline(error)
        if run_id is None:
            run_id = new_placeholder("run")
            spooled_tags = {**args["tags"], SPOOL_ID_TAG: run_id}  # lets a second sync find the run the first made
            self.spool.append("create_run", {**args, "placeholder": run_id, "tags": spooled_tags})
        if self.spool is not None:
            self.spool.record_created(run_id, args["tags"])
        return run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [[k, str(v)[:MAX_PARAM_LENGTH]] for k, v in sorted(params.items())]
        for start in range(0, len(items), 100):  # log_batch takes at most 100 params per call
            self._write("log_batch", {"run_id": run_id, "params": items[start:start + 100]})

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        # The timestamp is fixed here and kept by the spool: a write replayed twice is the same row, not a copy.
        now = _now_ms()
        items = [[k, float(v), now, int(step)] for k, v in metrics.items() if _is_number(v)]
        if items:
            self._write("log_batch", {"run_id": run_id, "metrics": items})

    def log_metric_rows(self, run_id: str, rows: list[tuple[int, dict[str, float], int]]) -> None:
        """Several steps' metrics, as (step, metrics, timestamp in ms), in as few calls as MLflow allows."""
        items = [[k, float(v), int(ms), int(step)] for step, metrics, ms in rows for k, v in metrics.items() if _is_number(v)]
        for start in range(0, len(items), MAX_METRICS_PER_BATCH):
            self._write("log_batch", {"run_id": run_id, "metrics": items[start:start + MAX_METRICS_PER_BATCH]})

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        self._write("log_batch", {"run_id": run_id, "tags": [[k, str(v)[:5000]] for k, v in tags.items()]})

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        self._write("log_text", {"run_id": run_id, "text": json.dumps(obj, indent=2, default=str),
                                 "artifact_file": artifact_file})

    def log_table(self, run_id: str, columns: dict[str, list[Any]], artifact_file: str) -> None:
        """A table artifact (column name -> values) that the MLflow UI shows as a table and can compare across
        runs. MLflow appends to a table already logged under the same name."""
        self._write("log_table", {"run_id": run_id, "columns": columns, "artifact_file": artifact_file})

    def log_file(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self._write("log_artifact", {"run_id": run_id, "path": str(Path(path).resolve()),
                                     "artifact_path": artifact_path})

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self._write("set_terminated", {"run_id": run_id, "status": status, "end_time": _now_ms()})

    def reopen(self, run_id: str) -> None:
        """Mark an ended run as running again (a resumed sweep continues its parent run)."""
        self._write("reopen", {"run_id": run_id})

    def close_if_running(self, run_id: str, tags: dict[str, Any], status: str) -> None:
        """Tag and end a run unless it already ended (a trial records its own end when it can). When spooled, the
        check happens at replay, after the run's earlier writes."""
        self._write("close_if_running", {"run_id": run_id, "tags": [[k, str(v)[:5000]] for k, v in tags.items()],
                                         "status": status, "end_time": _now_ms()})

    # -- reads: "unknown" (with a warning) rather than a crash when the server is down ----------------------

    def _read(self, fn: Callable[[], T], default: T, what: str) -> T:
        try:
            return self.call(fn)
        except TrackingUnavailable as error:
            log.warning("%s unknown: %s", what, error)
            return default

    def _local_only(self, *ids: str | None) -> bool:
        """Whether the server cannot know these ids yet: placeholders that no sync has created."""
        return self.spool is not None and self.spool.unresolved(list(ids))

    def _resolve(self, value: str) -> str:
        return self.spool.resolve(value) if self.spool is not None else value

    def end_state(self, run_id: str | None) -> str | None:
        """A run's end-state tag as the server has it; None when unknown (or when the spool holds newer writes)."""
        run_id = self._resolve(run_id) if run_id else None
        if not run_id or self._local_only(run_id) or (self.spool is not None and self.spool.held(run_id)):
            return None
        return self._read(lambda: self.client.get_run(run_id).data.tags.get(END_STATE_TAG), None, "end state")

    def metric_history(self, run_id: str, key: str) -> list:
        """Every logged value of `key` for the run, as the server has them, retried ([] when it does not answer)."""
        run_id = self._resolve(run_id)
        if self._local_only(run_id):
            return []
        return self._read(lambda: self.client.get_metric_history(run_id, key), [], f"{key} history of {run_id}")

    def last_step(self, run_id: str, key: str) -> int:
        """The last step at which `key` was logged for the run, on the server or in the spool (0 if none)."""
        run_id = self._resolve(run_id)
        steps = set(self.spool.metric_steps(run_id, key)) if self.spool is not None else set()
        steps |= {m.step for m in self.metric_history(run_id, key)}
        return max(steps, default=0)

    def trial_run(self, experiment_id: str, parent_run_id: str, trial_id: str) -> str | None:
        """The nested run a trial created: from this machine's record of created runs, else found by its tags."""
        experiment_id, parent_run_id = self._resolve(experiment_id), self._resolve(parent_run_id)
        if self.spool is not None:
            local = self.spool.created_run({PARENT_TAG: parent_run_id, TRIAL_TAG: trial_id})
            if local or self._local_only(experiment_id, parent_run_id):
                return local
        runs = self._read(lambda: self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}' and tags.`{TRIAL_TAG}` = '{trial_id}'",
            max_results=1), [], f"the run of trial {trial_id}")
        return runs[0].info.run_id if runs else None

    def trial_runs(self, experiment_id: str, parent_run_id: str) -> list:
        """The sweep's trial runs as the server has them ([] when it does not answer)."""
        experiment_id, parent_run_id = self._resolve(experiment_id), self._resolve(parent_run_id)
        if self._local_only(experiment_id, parent_run_id):
            return []
        return self._read(lambda: self.client.search_runs(
            [experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'", max_results=10000),
            [], "the trial runs")

    def spool_note(self, sweep_root: Path) -> str | None:
        """What to tell the user at the end of a sweep when some writes wait in the spool."""
        pending = self.spool.pending() if self.spool else 0
        if not pending:
            return None
        return (f"{pending} tracking writes could not reach {self.uri} and are kept in {self.spool.folder}; once "
                f"the server is back, run: finesweep sync {sweep_root}")


def apply_op(client: "MlflowClient", op: str, args: dict[str, Any], spool_folder: Path | None = None) -> Any:
    """Perform one write, the same way whether it is sent at once or replayed from the spool."""
    from mlflow.entities import Metric, Param, RunTag

    if op == "create_experiment":
        found = client.get_experiment_by_name(args["name"])
        return found.experiment_id if found else client.create_experiment(args["name"], args.get("artifact_location"))
    if op == "create_run":
        return _create_run(client, args)
    if op == "log_batch":
        client.log_batch(args["run_id"], metrics=[Metric(*m) for m in args.get("metrics", [])],
                         params=[Param(*p) for p in args.get("params", [])],
                         tags=[RunTag(*t) for t in args.get("tags", [])])
    elif op == "log_text":
        client.log_text(args["run_id"], args["text"], args["artifact_file"])
    elif op == "log_table":
        client.log_table(args["run_id"], data=args["columns"], artifact_file=args["artifact_file"])
    elif op == "log_artifact":  # a spooled copy's path is relative to the spool folder; an absolute one stays
        client.log_artifact(args["run_id"], str(Path(spool_folder or ".") / args["path"]), args.get("artifact_path"))
    elif op == "set_terminated":
        client.set_terminated(args["run_id"], status=args["status"], end_time=args["end_time"])
    elif op == "reopen":
        client.update_run(args["run_id"], status="RUNNING")
    elif op == "close_if_running":
        if client.get_run(args["run_id"]).info.status == "RUNNING":
            client.log_batch(args["run_id"], tags=[RunTag(*t) for t in args["tags"]])
            client.set_terminated(args["run_id"], status=args["status"], end_time=args["end_time"])
    else:
        raise ValueError(f"unknown tracking operation {op!r} in the spool (written by a newer finesweep?)")
    return None


def _create_run(client: "MlflowClient", args: dict[str, Any]) -> str:
    placeholder = args.get("placeholder")
    if placeholder:  # created by an earlier sync that died before it could record the id: reuse that run
        found = client.search_runs([args["experiment_id"]], filter_string=f"tags.`{SPOOL_ID_TAG}` = '{placeholder}'",
                                   max_results=1)
        if found:
            return found[0].info.run_id
    run = client.create_run(args["experiment_id"], start_time=args.get("start_time"), tags=args["tags"],
                            run_name=args["run_name"])
    return run.info.run_id


def _now_ms() -> int:
    return int(time.time() * 1000)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
