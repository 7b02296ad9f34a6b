"""The console without --verbose: finesweep's own records and other libraries' errors; the libraries' warnings
(through the root's handlers, Python's warnings module, or console handlers of their own, as torch's) go to the
sweep's log file instead."""

from __future__ import annotations

import io
import logging
import warnings

import pytest

from finesweep.search.outputs.logs import FinesweepOnly, ToSweepLog, log_to_file, quiet_console, route_library_consoles


@pytest.fixture
def console():
    """A root console handler as basicConfig makes it, and a library logger with a console handler of its own;
    the process's logging as it was afterwards."""
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    terminal = io.StringIO()
    root.addHandler(logging.StreamHandler(terminal))
    library = logging.getLogger("somelibrary.internals")
    library.addHandler(logging.StreamHandler(terminal))  # its own, as torch's loggers have
    library.propagate = False
    try:
        yield terminal
    finally:
        for handler in [h for h in root.handlers if h not in before[0]]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(before[1])
        library.handlers.clear()
        library.propagate = True
        logging.captureWarnings(False)


def test_other_libraries_warnings_reach_the_log_file_and_not_the_console(console, tmp_path):
    quiet_console()
    log_to_file(tmp_path / "finesweep.log")
    logging.getLogger("finesweep.search.sweep").warning("a finesweep warning")
    logging.getLogger("otherlibrary").warning("a library notice")
    logging.getLogger("otherlibrary").error("a library error")
    logging.getLogger("somelibrary.internals").warning("through its own handler")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)
    shown, logged = console.getvalue(), (tmp_path / "finesweep.log").read_text()
    assert "a finesweep warning" in shown and "a library error" in shown
    for quiet in ("a library notice", "through its own handler", "a deprecation"):
        assert quiet not in shown and quiet in logged, quiet
    assert any(isinstance(f, FinesweepOnly) for h in logging.getLogger().handlers for f in h.filters)
    assert any(isinstance(f, ToSweepLog) for f in logging.getLogger("somelibrary.internals").handlers[0].filters)


def test_the_log_file_keeps_finesweeps_notices_and_other_libraries_warnings(console, tmp_path):
    log_to_file(tmp_path / "finesweep.log")
    logging.getLogger("finesweep.search.probe.table").info("a finesweep notice")
    logging.getLogger("onnxscript.optimizer").info("a library's progress")
    logging.getLogger("onnxscript.optimizer").warning("a library's warning")
    logged = (tmp_path / "finesweep.log").read_text()
    assert "a finesweep notice" in logged and "a library's warning" in logged
    assert "a library's progress" not in logged


def test_a_second_sweep_in_the_same_process_logs_to_its_own_file(console, tmp_path):
    quiet_console()
    log_to_file(tmp_path / "first.log")
    log_to_file(tmp_path / "second.log")
    logging.getLogger("somelibrary.internals").warning("after the second sweep started")
    assert "after the second sweep started" in (tmp_path / "second.log").read_text()
    assert "after the second sweep started" not in (tmp_path / "first.log").read_text()


def test_a_library_that_makes_its_console_handler_after_the_log_opened_is_routed_by_start_ray(console, tmp_path):
    """Ray makes its console handler (a StreamHandler of its own class) on import, after the sweep's log is open, and
    its warnings reached the terminal ("Could not find metrics corresponding to checkpoint_000007", the export
    reading back a checkpoint the budget cut off). What start_ray calls routes such a handler to the sweep's log."""
    import ray  # noqa: F401 - its logger's handler is made on import

    class OwnHandler(logging.StreamHandler):
        pass

    late = logging.getLogger("latelibrary")
    ray_handlers = logging.getLogger("ray").handlers
    try:
        quiet_console()
        log_to_file(tmp_path / "finesweep.log")
        late.addHandler(OwnHandler(console))  # made after the log opened, as Ray's is on ray.init
        late.propagate = False
        late.warning("before it is routed")
        route_library_consoles()
        late.warning("a checkpoint without its metrics")
        late.error("a library error")
        shown, logged = console.getvalue(), (tmp_path / "finesweep.log").read_text()
        assert "before it is routed" in shown, "the case the routing exists for"
        assert "a checkpoint without its metrics" not in shown and "a checkpoint without its metrics" in logged
        assert "a library error" in shown
        ray_consoles = [h for h in ray_handlers if type(h).__name__ == "PlainRayHandler"]
        assert ray_consoles and all(any(isinstance(f, ToSweepLog) for f in h.filters) for h in ray_consoles)
    finally:
        late.handlers.clear()
        late.propagate = True
        for handler in ray_handlers:
            for routed in [f for f in handler.filters if isinstance(f, ToSweepLog)]:
                handler.removeFilter(routed)
