"""Where a sweep's log records go: finesweep's at INFO and above and other libraries' warnings and errors to the
sweep's log file; on the console (without --verbose), finesweep's own records and other libraries' errors, while
their warnings go to the file."""

from __future__ import annotations

import logging
from pathlib import Path


def log_to_file(path: Path) -> None:
    """This process's log records also go to `path` (appended; finesweep's from INFO, other libraries' from WARNING:
    FinesweepInfo), while the console keeps showing what it showed: tracebacks a user need not read (an export
    variant that failed) are kept there, not lost."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "finesweep_sweep_log", False)]:
        root.removeHandler(handler)  # the previous sweep's, in a process that runs several
        handler.close()
    for handler in root.handlers:
        if type(handler) is logging.StreamHandler and handler.level == logging.NOTSET:
            handler.setLevel(root.level)  # the console's level was the root's: it stays when the root lowers
    path.parent.mkdir(parents=True, exist_ok=True)
    file_handler = logging.FileHandler(path, encoding="utf-8")
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    file_handler.setLevel(logging.INFO)
    file_handler.addFilter(FinesweepInfo())
    file_handler.finesweep_sweep_log = True  # type: ignore[attr-defined]
    root.addHandler(file_handler)
    root.setLevel(min(root.level, logging.INFO))
    if any(isinstance(f, FinesweepOnly) for handler in root.handlers for f in handler.filters):
        _libraries_console_to(file_handler)


def sweep_log_file() -> Path | None:
    """The log file this process's sweep writes to (log_to_file's), if any: a child process writes there too."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, "finesweep_sweep_log", False):
            return Path(handler.baseFilename)  # type: ignore[attr-defined]
    return None


class FinesweepInfo(logging.Filter):
    """In the sweep's log file: finesweep's records from INFO, other libraries' from WARNING. Their notices are their
    own progress (ONNX's graph optimizer logs 100 lines at INFO for each exported model, 90% of a sweep's log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".")[0] == "finesweep" or record.levelno >= logging.WARNING


class FinesweepOnly(logging.Filter):
    """On the console: finesweep's own records, and other libraries' errors. Their warnings and notices (torchao's
    optional kernels, bitsandbytes' CPU kernels, torch's deprecations) are nothing a user of finesweep acts on; they
    still reach the sweep's log file, whose handler has no such filter."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".")[0] == "finesweep" or record.levelno >= logging.ERROR


class ToSweepLog(logging.Filter):
    """On a library's own console handler: the record goes to the sweep's log file instead (errors to both)."""

    def __init__(self, file_handler: logging.Handler):
        super().__init__()
        self.file_handler = file_handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.file_handler.level:
            self.file_handler.handle(record)
        return record.levelno >= logging.ERROR


def route_library_consoles() -> None:
    """After a library that makes its console handler when it starts (Ray's, at import and at ray.init), its
    warnings go to the sweep's log too, where the console shows finesweep's own records only (quiet_console)."""
    root = logging.getLogger()
    sweep_log = next((h for h in root.handlers if getattr(h, "finesweep_sweep_log", False)), None)
    if sweep_log and any(isinstance(f, FinesweepOnly) for handler in root.handlers for f in handler.filters):
        _libraries_console_to(sweep_log)


def _libraries_console_to(file_handler: logging.Handler) -> None:
    """Libraries that log through console handlers of their own, on loggers that do not propagate to the root's
    (torch's: its notices when torchao registers its types; Ray's, a StreamHandler of its own class), write to the
    sweep's log instead, as FinesweepOnly sends the others there. torch is imported first: a sweep loads it anyway,
    and its handlers exist from then."""
    import torch  # noqa: F401 - its loggers' handlers are made on import

    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] != "finesweep":
            for handler in [h for h in logger.handlers if _console_handler(h)]:
                for stale in [f for f in handler.filters if isinstance(f, ToSweepLog)]:
                    handler.removeFilter(stale)  # the previous sweep's, in a process that runs several
                handler.addFilter(ToSweepLog(file_handler))


def _console_handler(handler: logging.Handler) -> bool:
    """A handler that writes to a stream, not to a file of its own (a FileHandler is a StreamHandler too)."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


def quiet_console() -> None:
    """Python warnings become log records (logger py.warnings) and the console shows only FinesweepOnly's: other
    libraries' warnings go to the sweep's log file instead of the terminal."""
    logging.captureWarnings(True)
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and not any(isinstance(f, FinesweepOnly) for f in handler.filters):
            handler.addFilter(FinesweepOnly())
