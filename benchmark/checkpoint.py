"""Checkpoints that cannot run code when they are read back, and the RNG state they carry.

Choice: the simulation is saved as objects (the algorithm, its models, optimizers, client
states, the ledger) and read with ``torch.load(weights_only=True)`` plus an allowlist.
Turning every algorithm into plain tensors and containers was rejected: an algorithm keeps
arbitrary state (personal models and optimizers created lazily per client, prototype banks,
PyG convolutions with their introspection caches), so a generic tensors-only encoding could
not rebuild it without each of the ~20 algorithms writing its own (de)serializer.

The allowlist is computed per file: :func:`torch.serialization.get_unsafe_globals_in_checkpoint`
lists the globals a file names, and :func:`admissible` accepts a global only when it is

* a class defined in this project's packages (``benchmark``, ``baselines``, ``methods``,
  ``data_prep``);
* a torch/PyG module, optimizer or LR scheduler class, or a class of PyG's ``inspector``
  (GCNConv and friends keep one);
* numpy's array and dtype classes, with numpy's array rebuild helper;
* a builtin scalar/container type, or a non-callable ``typing`` construct (PyG's inspector
  stores annotations such as ``Union[int, None]``), with ``operator.getitem`` that builds them.

Anything else (``os.system``, ``posix.system``, ``builtins.eval``/``open``, ``subprocess``...)
is refused before torch reads the pickle, and torch's own unpickler refuses it again. A
module named in the file is imported only when its top package is one of those above, so a
crafted name cannot trigger an arbitrary import. What is left is that an allowed class may be
instantiated with crafted arguments; no class in those packages touches files or processes in
its constructor or ``__setstate__``.

Every checkpoint stores a format tag, a format version and the config hash of its run. A file
that is corrupt, truncated, foreign, of another version or of another config is renamed to
``<name>.bad-<timestamp>`` with a one-line warning on stderr, and the run starts fresh.

RNG states are stored as plain lists of ints, so ``map_location`` never moves them: they are
restored from CPU ``uint8`` tensors whatever device the simulation is loaded onto (both
``torch.set_rng_state`` and ``torch.cuda.set_rng_state_all`` require CPU ByteTensors).
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import io
import os
import pickle
import random
import sys
import time
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.errors import first_line

FORMAT = "fedmm-checkpoint"
VERSION = 2  # 2: every hook runs under its own seed (benchmark.roles)
PROJECT_PACKAGES = frozenset({"benchmark", "baselines", "methods", "data_prep"})
_IMPORTABLE = PROJECT_PACKAGES | {"torch", "torch_geometric", "numpy", "builtins", "typing", "_operator",
                                  "operator", "inspect", "collections"}
_BUILTIN_TYPES = frozenset({"int", "float", "complex", "bool", "str", "bytes", "bytearray", "tuple", "list",
                            "dict", "set", "frozenset", "slice", "range", "type", "object", "NoneType"})
_NAMED_HELPERS = frozenset({"numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct",
                            "_operator.getitem", "operator.getitem"})


class BadCheckpoint(Exception):
    """A checkpoint file that must not be resumed from (the message says why)."""


# ----------------------------------------------------------------------------- RNG state
def rng_state() -> dict[str, Any]:
    """Every RNG the simulation draws from, as plain ints (no tensors, no numpy arrays)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def rng_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """The torch states of ``state`` as the CPU ByteTensors torch wants back."""
    out: dict[str, Any] = {"torch": torch.tensor(state["torch"], dtype=torch.uint8, device="cpu")}
    if "cuda" in state:
        out["cuda"] = [torch.tensor(s, dtype=torch.uint8, device="cpu") for s in state["cuda"]]
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the RNGs saved by :func:`rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    tensors = rng_tensors(state)
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])


# ----------------------------------------------------------------------------- allowlist
def _resolve(name: str) -> Any:
    """The object a pickle global names, or None when it cannot be found."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module)
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _is_torch_state_class(obj: type) -> bool:
    from torch.optim.lr_scheduler import LRScheduler

    if issubclass(obj, (torch.nn.Module, torch.optim.Optimizer, LRScheduler)):
        return True
    return obj.__module__ == "torch_geometric.inspector"


def admissible(name: str) -> bool:
    """Whether a global named in a checkpoint may be loaded (see the module docstring)."""
    top = name.split(".", 1)[0]
    if top not in _IMPORTABLE:
        return False
    if name in _NAMED_HELPERS:
        return _resolve(name) is not None
    obj = _resolve(name)
    if obj is None:
        return False
    if top in PROJECT_PACKAGES:
        return isinstance(obj, type)
    if top in ("torch", "torch_geometric"):
        return isinstance(obj, type) and _is_torch_state_class(obj)
    if top == "numpy":
        return isinstance(obj, type) and issubclass(obj, (np.ndarray, np.dtype))
    if top == "builtins":
        return isinstance(obj, type) and name.split(".", 1)[1] in _BUILTIN_TYPES and obj is getattr(
            builtins, obj.__name__, type(None))
    if top == "typing":
        return not inspect.isroutine(obj) and not inspect.ismodule(obj)
    if name == "inspect._empty":
        return True
    if top == "collections":
        return name in ("collections.OrderedDict", "collections.defaultdict", "collections.deque",
                        "collections.Counter")
    return False


def _allowed_globals(path: Path | io.BytesIO) -> list[tuple[Any, str]]:
    """Resolve the globals of ``path``; raise BadCheckpoint naming the first refused one."""
    try:
        if isinstance(path, io.BytesIO):
            path.seek(0)
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as e:  # noqa: BLE001 - any failure to parse means a damaged file
        raise BadCheckpoint(f"unreadable ({type(e).__name__}: {first_line(e)[:160]})") from e
    refused = [n for n in names if not admissible(n)]
    if refused:
        raise BadCheckpoint(f"refers to '{refused[0]}', which a checkpoint may not load")
    return [(_resolve(n), n) for n in names]


# ----------------------------------------------------------------------------- save / load
class StateDefaultDict(defaultdict):
    """A defaultdict as checkpoints store it (torch optimizers keep their state in one).

    torch's weights_only unpickler fills only plain dicts, so a defaultdict is saved as a call
    to this class with its factory and a plain dict of its items.
    """

    def __reduce__(self) -> tuple:
        return (type(self), (self.default_factory, dict(self)))


class _Pickler(pickle._Pickler):  # the Python pickler: its save_global can be refined
    """Saves every defaultdict as a :class:`StateDefaultDict` (see there), and names a
    project class nested in another (``KGAlgorithm.Config``) by its dotted qualname.

    torch writes pickle protocol 2, where the standard pickler reaches a nested class through
    a call to ``builtins.getattr`` (a function no checkpoint may load). Protocol 2's GLOBAL
    opcode can carry the dotted name itself, which the loader resolves and allowlists like
    any other class of the project.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, defaultdict):
            return (StateDefaultDict, (obj.default_factory, dict(obj)))
        return NotImplemented

    def save_global(self, obj: Any, name: str | None = None) -> None:
        qualname = name or getattr(obj, "__qualname__", None)
        module = getattr(obj, "__module__", None) or ""
        if (isinstance(obj, type) and qualname and "." in qualname and "<locals>" not in qualname
                and module.split(".", 1)[0] in PROJECT_PACKAGES):
            self.write(pickle.GLOBAL + module.encode("utf-8") + b"\n" + qualname.encode("utf-8") + b"\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


class _PickleModule:
    """The ``pickle_module`` handed to torch.save: the standard one with :class:`_Pickler`."""

    Pickler = _Pickler
    Unpickler = pickle.Unpickler
    dump = staticmethod(pickle.dump)
    load = staticmethod(pickle.load)


def save(path: Path, sim: Any, config_hash: str) -> bool:
    """Write a checkpoint atomically; False (and a warning) when it could not be read back safely."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    blob = {"format": FORMAT, "version": VERSION, "config_hash": config_hash, "rng": rng_state(), "sim": sim}
    torch.save(blob, tmp, pickle_module=_PickleModule)
    try:
        _allowed_globals(tmp)
    except BadCheckpoint as e:
        tmp.unlink(missing_ok=True)
        print(f"warning: checkpoint not written: the simulation {e}", file=sys.stderr)
        return False
    os.replace(tmp, path)
    return True


def read(path: Path, config_hash: str, map_location: Any = None) -> tuple[Any, dict[str, Any]]:
    """Return (simulation, rng state) from ``path``; BadCheckpoint when it must not be used."""
    allowed = _allowed_globals(path)
    try:
        with torch.serialization.safe_globals(allowed):
            blob = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, KeyError,
            AttributeError, TypeError, OSError) as e:
        raise BadCheckpoint(f"unreadable ({type(e).__name__}: {first_line(e)[:160]})") from e
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise BadCheckpoint("is not a FedMM-Bench checkpoint")
    if blob.get("version") != VERSION:
        raise BadCheckpoint(f"has format version {blob.get('version')!r}, expected {VERSION}")
    if blob.get("config_hash") != config_hash:
        raise BadCheckpoint(f"was written for config {blob.get('config_hash')!r}, not {config_hash!r}")
    if "sim" not in blob or not isinstance(blob.get("rng"), dict):
        raise BadCheckpoint("lacks the simulation or its RNG state")
    return blob["sim"], blob["rng"]


def dumps(obj: Any) -> bytes:
    """``obj`` (a client's state: models, optimizers, tensors, containers) as bytes that
    :func:`loads` reads back under the same allowlist as a checkpoint file."""
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_module=_PickleModule)
    return buf.getvalue()


def loads(data: bytes, map_location: Any = None) -> Any:
    """Read :func:`dumps` output with ``weights_only=True`` and the per-file allowlist;
    BadCheckpoint when it names anything a checkpoint may not load."""
    buf = io.BytesIO(data)
    allowed = _allowed_globals(buf)
    buf.seek(0)
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(buf, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, KeyError,
            AttributeError, TypeError) as e:
        raise BadCheckpoint(f"unreadable ({type(e).__name__}: {first_line(e)[:160]})") from e


def quarantine(path: Path, reason: str) -> Path:
    """Rename a bad checkpoint aside and say so in one line on stderr."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    dest = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    os.replace(path, dest)
    print(f"warning: checkpoint {path} {reason}; moved to {dest.name}, starting fresh", file=sys.stderr)
    return dest


def load(path: Path, config_hash: str, map_location: Any = None) -> Any | None:
    """The simulation saved at ``path`` with the RNGs restored, or None (fresh start)."""
    if not path.exists():
        return None
    try:
        sim, rng = read(path, config_hash, map_location)
        set_rng_state(rng)
    except BadCheckpoint as e:
        quarantine(path, str(e))
        return None
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # malformed RNG state
        quarantine(path, f"has a malformed RNG state ({type(e).__name__})")
        return None
    return sim


__all__ = ["BadCheckpoint", "FORMAT", "VERSION", "admissible", "dumps", "load", "loads", "quarantine", "read", "rng_state",
           "rng_tensors", "save", "set_rng_state"]
