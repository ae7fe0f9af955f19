"""The tracker contract, the registry of trackers, and the engine's guarded set of them.

A tracker hears three events of one run, one method each:

* ``start(config, tags)``: the flattened config (dotted keys, plain values) and the run's
  provenance as string tags (git sha, device, versions...);
* ``log_round(round, metrics)``: what the engine keeps in ``record.curves`` for that round
  (the validation and test primary metric when evaluated, bytes up and down, seconds, and
  any other split a method reports), missing values left out;
* ``finish(record)``: the result record; a tracker logs its ``metrics`` (the best round's
  scores) as final metrics and its status, then releases what it holds.

``close()`` releases a tracker that never saw ``finish`` (the run raised). Trackers are
observability, not protocol: ``output`` is left out of every config and protocol hash, and a
tracker that fails warns on one line and is dropped; the run and its record go on
(:class:`Trackers`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from benchmark.errors import ConfigError, first_line
from benchmark.record import Record
from benchmark.registry import TRACKERS
from benchmark.dotted import flatten
from benchmark.safe_yaml import clip

#: what ``pip`` installs the optional trackers' packages with
EXTRA = "pip install -e .[track]"


def as_text(value: Any) -> str:
    """A config value as a tracker shows it: strings as they are, anything else as JSON (null,
    true, [..]), the way the YAML that set it reads."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def round_metrics(history: dict[str, list], index: int = -1) -> tuple[int, dict[str, float]]:
    """(step, {curve: value}) of one round of the engine's history, unmeasured values left out.
    The step counts rounds run, from 1, as the progress bar does (the record's ``curves["round"]``
    and ``best_round`` count from 0: step = round + 1)."""
    i = index % len(history["round"])
    return int(history["round"][i]) + 1, {k: v[i] for k, v in history.items()
                                          if k != "round" and i < len(v) and v[i] is not None}


def run_name(cfg: Any) -> str:
    """The folder and run name of a run: algorithm, config hash (seed included), seed."""
    return f"{cfg.algorithm.name}-{cfg.hash()}-seed{cfg.seed}"


class Tracker(ABC):
    """One experiment tracker (see the module docstring for the events).

    ``root`` is ``output.tracker_dir`` (shared by every run: MLflow keeps its store there),
    ``name`` the run's name; per-run files go under ``run_dir`` (``root / name``). A tracker
    imports its optional package in ``__init__`` (:meth:`require`), so a missing one is a
    one-line ConfigError before the run starts, and writes nothing before ``start``.
    """

    #: modules the tracker imports (checked cheaply at config time, imported at construction)
    requires: ClassVar[tuple[str, ...]] = ()
    registry_name: ClassVar[str] = ""

    def __init__(self, root: Path, name: str) -> None:
        self.root = Path(root)
        self.name = name
        self.run_dir = self.root / name

    @classmethod
    def check_available(cls) -> None:
        """ConfigError naming the extra when a module the tracker needs is not installed."""
        for module in cls.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise ConfigError(f"tracker '{cls.registry_name}' needs the package '{module}', which is not "
                                  f"installed: {EXTRA}")

    def require(self, module: str) -> Any:
        """Import ``module`` (lazily: the core runs without the tracker's packages); a missing
        or broken one is a one-line ConfigError naming the extra."""
        try:
            return importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"tracker '{self.registry_name}' cannot import {module} ({clip(first_line(e), 120)}): "
                              f"{EXTRA}") from None

    @abstractmethod
    def start(self, config: dict[str, Any], tags: dict[str, str]) -> None:
        """The run begins: its flattened config (dotted keys) and provenance tags."""

    @abstractmethod
    def log_round(self, round: int, metrics: dict[str, float]) -> None:
        """One round's curves (``record.curves`` at that round, unmeasured ones left out)."""

    @abstractmethod
    def finish(self, record: Record) -> None:
        """The run ended with ``record``: log its final metrics and status, release everything."""

    def close(self) -> None:
        """Release what the tracker holds when the run raised before ``finish`` (idempotent)."""


def tracker_names() -> tuple[str, ...]:
    """Every registered tracker (the choices of ``output.trackers``)."""
    from benchmark.registry import load_plugins

    load_plugins()
    return tuple(TRACKERS.names())


def check_trackers(names: list[str]) -> None:
    """Each name is a registered tracker whose packages are installed (one line otherwise)."""
    for name in names:
        TRACKERS.get(name).check_available()


def _warn(name: str, event: str, exc: BaseException) -> None:
    print(f"warning: tracker '{name}' failed in {event} ({type(exc).__name__}: {clip(first_line(exc), 200)}); "
          f"it is off for the rest of this run, the record is not affected", file=sys.stderr)


class Trackers:
    """The trackers of one run, as the engine drives them: every call guarded, so a tracker
    that raises warns once on stderr, is closed and dropped, and the run goes on. Empty (and
    free) when ``output.trackers`` is empty."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.active = list(trackers)

    @classmethod
    def from_config(cls, cfg: Any) -> Trackers:
        """The configured trackers, constructed (their packages imported: a missing one is a
        ConfigError now, before any data is built); nothing is written yet."""
        names = list(cfg.output.trackers)
        if not names:
            return cls([])
        from benchmark.registry import load_plugins

        load_plugins()
        root, name = Path(cfg.output.tracker_dir), run_name(cfg)
        return cls([TRACKERS.get(n)(root, name) for n in dict.fromkeys(names)])

    def __bool__(self) -> bool:
        return bool(self.active)

    def _each(self, event: str, *args: Any) -> None:
        for t in list(self.active):
            try:
                getattr(t, event)(*args)
            except Exception as e:  # noqa: BLE001 - observability must not cost the record
                _warn(t.registry_name or type(t).__name__, event, e)
                self._drop(t)

    def _drop(self, t: Tracker) -> None:
        if t in self.active:
            self.active.remove(t)
        try:
            t.close()
        except Exception:  # noqa: BLE001 - already warned about this tracker
            pass

    def start(self, cfg: Any, provenance: dict[str, Any]) -> None:
        """Tell each tracker the run's flattened config (``cfg.to_dict()``) and, as string tags,
        what names the run (name, algorithm, dataset, task, seed) and its ``provenance`` (the
        record's: git sha, device, versions, config and protocol hashes...), flattened."""
        if not self.active:
            return
        tags = {"run_name": run_name(cfg), "algorithm": cfg.algorithm.name, "dataset": cfg.dataset.name,
                "task": cfg.task.name, "seed": cfg.seed, **flatten(provenance)}
        self._each("start", flatten(cfg.to_dict()), {k: as_text(v) for k, v in tags.items()})

    def log_round(self, history: dict[str, list], index: int = -1) -> None:
        """Log one round of the engine's history (the last one by default)."""
        if self.active and history.get("round"):
            self._each("log_round", *round_metrics(history, index))

    def replay(self, history: dict[str, list]) -> None:
        """Log every round a resumed run's checkpoint already holds, so each run's trackers
        show the whole curve."""
        for i in range(len(history.get("round", [])) if self.active else 0):
            self.log_round(history, i)

    def finish(self, record: Record | None) -> None:
        """Hand every tracker the record and release it; None (the run raised): only release."""
        if record is not None:
            self._each("finish", record)
        self.close()

    def close(self) -> None:
        """Release every tracker still open (a failure warns, like any other event's)."""
        for t in list(self.active):
            self.active.remove(t)
            try:
                t.close()
            except Exception as e:  # noqa: BLE001 - observability must not cost the record
                _warn(t.registry_name or type(t).__name__, "close", e)

    @contextmanager
    def closed_on_error(self) -> Iterator[None]:
        """Close every tracker when the block raises (a killed or failing run), then re-raise."""
        try:
            yield
        except BaseException:
            self.close()
            raise


__all__ = ["EXTRA", "TRACKERS", "Tracker", "Trackers", "as_text", "check_trackers", "flatten", "round_metrics",
           "run_name", "tracker_names"]
