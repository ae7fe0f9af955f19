"""Where cells and runs execute: in this process, on a Ray cluster, or as a Flower federation.

Backends are found by name (``--backend NAME``), like every other component:

* ``SWEEP_BACKENDS``: how ``sweep`` runs a suite's cells (``joblib``: local processes, the
  default; ``ray``: Ray tasks on a local or remote cluster);
* ``RUN_BACKENDS``: how ``run`` executes one cell (``inprocess``, the default; ``flower``:
  the Flower simulation engine, a ``ServerApp`` and one ``ClientApp`` per client).

The engines themselves (Ray, Flower) are imported only when their backend is used, so the
core runs without the ``scale`` extra; asking for one that is not installed is a one-line
``ConfigError`` that says what to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from benchmark.errors import ConfigError
from benchmark.registry import Registry

SCALE_HINT = "pip install -e .[scale]"

SWEEP_BACKENDS: Registry[Callable[..., Any]] = Registry("sweep backend", listed=False)
RUN_BACKENDS: Registry[Callable[..., Any]] = Registry("run backend", listed=False)


def require(module: str, backend: str) -> ModuleType:
    """Import an optional engine, or a one-line ConfigError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"--backend {backend} needs the '{module.split('.')[0]}' package: "
                          f"{SCALE_HINT}") from None


#: modules that register backends (by name, like ``registry.PLUGIN_PACKAGES``); each imports
#: its engine only when its backend runs
BACKEND_MODULES = ("benchmark.backends.ray_sweep", "benchmark.backends.flower_sim")


def _load() -> None:
    """Register the built-in backends (``joblib`` registers itself in ``benchmark.sweep``)."""
    for module in BACKEND_MODULES:
        importlib.import_module(module)


def _ready(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The backend, once the engines it names in ``requires`` import (checked before any work starts)."""
    for module in getattr(fn, "requires", ()):
        require(module, name)
    return fn


def sweep_backend(name: str) -> Callable[..., Any]:
    _load()
    return _ready(SWEEP_BACKENDS.get(name), name)


def run_backend(name: str) -> Callable[..., Any]:
    _load()
    return _ready(RUN_BACKENDS.get(name), name)


__all__ = ["BACKEND_MODULES", "RUN_BACKENDS", "SCALE_HINT", "SWEEP_BACKENDS", "require", "run_backend", "sweep_backend"]
