"""String-addressable registries (PyKEEN's class-resolver idea, without if/elif dispatch).

Every pluggable component registers itself with a decorator::

    @ALGORITHMS.register("fedavg")
    class FedAvg(Algorithm): ...

and is found by name from YAML. ``load_plugins()`` imports the packages that hold
components so that their decorators run.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from benchmark.errors import ConfigError, unknown

T = TypeVar("T")

# A registered name is typed on command lines and in YAML and printed in tables and file names.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")


def check_name(kind: str, name: object) -> str:
    """``name`` if it is letters, digits, '_' and '-' only; else a ConfigError naming it."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"{kind} name {name!r} is invalid: use only letters, digits, '_' and '-'")
    return name


def first_doc_line(obj: Any) -> str:
    """The first non-empty line of an object's docstring."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


#: every listed registry by plural kind, wherever it is defined (the KG decoders live in
#: benchmark/kge, the KG fusions and imputers in baselines/kg): what `list` prints
ALL_REGISTRIES: dict[str, "Registry[Any]"] = {}


class Registry(Generic[T]):
    """A name -> component map for one kind of component.

    A registry lists itself in ``ALL_REGISTRIES`` when it is created (``listed=False`` for
    throwaway ones), so a new kind of component shows up in `list` without editing it. Two
    listed registries of one kind would share one heading there and the first would vanish,
    so a second one is an error.
    """

    def __init__(self, kind: str, listed: bool = True) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        if listed:
            plural = kind + "s"
            if plural in ALL_REGISTRIES:
                raise ConfigError(f"a registry of kind '{kind}' already exists; give the new one another kind "
                                  f"(or listed=False for a throwaway one)")
            ALL_REGISTRIES[plural] = self

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """Class/function decorator registering the component under ``name``."""

        def deco(obj: T) -> T:
            key = check_name(self.kind, name if name is not None else getattr(obj, "__name__", str(obj)).lower())
            if key in self._items and self._items[key] is not obj:
                raise ConfigError(f"{self.kind} '{key}' is registered twice")
            self._items[key] = obj
            try:
                setattr(obj, "registry_name", key)
            except (AttributeError, TypeError):
                pass
            return obj

        return deco

    def unregister(self, name: str) -> None:
        """Remove a component (used by `submit` and tests that register temporary ones)."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        """Look a component up; an unknown name is a ConfigError suggesting the closest."""
        if name not in self._items:
            raise unknown(self.kind, name, self._items)
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)

    def describe(self) -> list[tuple[str, str]]:
        """(name, one-line doc) for every component, sorted by name."""
        return [(n, first_doc_line(self._items[n])) for n in self.names()]


DATASETS: Registry[Any] = Registry("dataset")
PARTITIONERS: Registry[Any] = Registry("partitioner")
MASKERS: Registry[Any] = Registry("masker")
TASKS: Registry[Any] = Registry("task")
MODELS: Registry[Any] = Registry("model")
FUSIONS: Registry[Any] = Registry("fusion")
BACKBONES: Registry[Any] = Registry("backbone")
ALGORITHMS: Registry[Any] = Registry("algorithm")
METRICS: Registry[Any] = Registry("metric")
#: experiment trackers a run reports to (``output.trackers``; benchmark/trackers)
TRACKERS: Registry[Any] = Registry("tracker")
#: how a loaded dataset becomes a federation, keyed by the dataset's ``kind`` (graph, kg, amfl):
#: ``builder(cfg, dataset, loader) -> FederatedData`` (data_prep/build.py, kg/build.py, amfl/build.py)
FEDERATION_BUILDERS: Registry[Any] = Registry("federation builder")


PLUGIN_PACKAGES = ("benchmark.tasks", "benchmark.models", "benchmark.metrics", "benchmark.trackers", "data_prep",
                   "baselines", "methods")
_loaded = False


def _import_tree(package: str) -> None:
    mod = importlib.import_module(package)
    for info in pkgutil.walk_packages(getattr(mod, "__path__", []), prefix=package + "."):
        if info.name.rsplit(".", 1)[-1].startswith("_") or ".tests" in info.name:
            continue
        if info.name == "methods.template":
            continue  # the submission template registers itself only when submitted
        importlib.import_module(info.name)


def load_plugins() -> None:
    """Import every module that registers components (idempotent)."""
    global _loaded
    if _loaded:
        return
    for pkg in PLUGIN_PACKAGES:
        _import_tree(pkg)
    _loaded = True


def display_name(algorithm: str) -> str:
    """How tables and the leaderboard name an algorithm no suite labels (a submitted method):
    the class's ``display_name`` when it sets one, else its docstring's lead before a colon
    ("Template: FedAvg with ..." -> "Template", a citation in brackets dropped) when that is a
    short name, else the registry key."""
    load_plugins()
    if algorithm not in ALGORITHMS:
        return algorithm
    cls = ALGORITHMS.get(algorithm)
    own = getattr(cls, "display_name", "")
    if isinstance(own, str) and own.strip():
        return own.strip()
    lead, colon, _ = first_doc_line(cls).partition(":")
    lead = lead.split(" (")[0].strip()  # "FedGCN (Yao et al., 2023)" -> "FedGCN"
    return lead if colon and lead and len(lead) <= 40 and len(lead.split()) <= 4 else algorithm


def applicable(algorithm: str, task: str) -> bool:
    """Whether ``algorithm`` runs ``task``: False only when the algorithm is registered and its
    ``tasks`` do not name the task. The one answer the engine (refuses the run), the sweep (skips
    the cell, neither run nor recorded) and the tables (print N/A) give. An unregistered name
    counts as applicable, so its run fails loudly on the name instead of vanishing as N/A."""
    load_plugins()
    if algorithm not in ALGORITHMS:
        return True
    return task in tuple(getattr(ALGORITHMS.get(algorithm), "tasks", ()) or ())
