"""Module paths of finesweep objects that sweeps started before search/ was split into subpackages saved in their
Tune experiment, and where those objects live now.

Tune pickles the Tuner's callbacks, stopper and searcher (with its Optuna sampler) when a sweep starts, and reads them
back on `finesweep resume`; pickle finds a class or function by the module path it was saved under. Before the move,
search/ was one flat package: `finesweep.search.tune`, `finesweep.search.trainable`, ... Those paths no longer exist,
so `install_old_module_paths` registers a stand-in module under each old path that hands out the object from its new
home: an old sweep resumes, and what it saves from then on names the new paths. The same holds for trainer/'s
serving modules, moved into trainer/serving/.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# old module path -> the modules that now hold what it held (looked up in this order)
OLD_MODULE_PATHS: dict[str, tuple[str, ...]] = {
    "finesweep.search.tune": ("finesweep.search.tuning.callbacks", "finesweep.search.tuning.samplers",
                              "finesweep.search.tuning.tuner", "finesweep.search.tuning.ray_cluster"),
    "finesweep.search.trainable": ("finesweep.search.tuning.trainable", "finesweep.search.tuning.context",
                                   "finesweep.search.tuning.sink", "finesweep.search.tuning.scratch"),
    "finesweep.search.distributed": ("finesweep.search.tuning.distributed",),
    "finesweep.search.report": ("finesweep.search.outputs.console",),
    "finesweep.search.best": ("finesweep.search.selection.best",),
    "finesweep.search.pareto": ("finesweep.search.selection.pareto", "finesweep.search.outputs.pareto_report"),
    "finesweep.search.recovery": ("finesweep.search.tuning.recovery",),
    "finesweep.search.spool": ("finesweep.search.tracking.spool", "finesweep.search.tracking.sync"),
    "finesweep.search.registry": ("finesweep.search.tracking.registry",),
    "finesweep.search.export": ("finesweep.search.outputs.export", "finesweep.search.outputs.card"),
    "finesweep.search.plots": ("finesweep.search.outputs.plots",),
    "finesweep.search.device": ("finesweep.search.probe.device",),
    # The export's runtimes, moved from trainer/ into trainer/serving/ (nothing Tune saves names them, but a pickle
    # that did would resolve too).
    **{f"finesweep.trainer.{name}": (f"finesweep.trainer.serving.{name}",)
       for name in ("quantize", "onnx_runtime", "onnx_decoder", "generate", "predict", "evaluate")},
}


class _MovedModule(types.ModuleType):
    """Stands under an old module path; an attribute is looked up in the modules that hold it now."""

    def __init__(self, name: str, homes: tuple[str, ...]):
        super().__init__(name, f"finesweep: moved to {', '.join(homes)}")
        self._homes = homes

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, attribute):
                return getattr(module, attribute)
        raise AttributeError(f"{self.__name__}.{attribute} has no new home in {', '.join(self._homes)}")


def install_old_module_paths() -> None:
    """Make every old module path importable (idempotent; a path that is a real module again is left alone)."""
    for old, homes in OLD_MODULE_PATHS.items():
        if old not in sys.modules:
            try:
                importlib.import_module(old)
            except ImportError:
                sys.modules[old] = _MovedModule(old, homes)
