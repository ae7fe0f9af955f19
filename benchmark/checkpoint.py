"""Checkpoints that cannot run code when they are read back, and the RNG state they carry.

A checkpoint is one safetensors file (``<config hash>.ckpt.safetensors``): the simulation's
tensors, and everything else (counters, RNG states, the algorithm's state structure, the
ledger, optimizer scalars) as a JSON tree beside them, written by :mod:`benchmark.state_codec`.
No pickle is involved anywhere: reading a file builds JSON values and tensors only, then the
code rebuilds its own objects from them, from a table of classes the code lists (never a name
the file resolves through modules, never an import). Objects the engine owns (the run's
context and config, the clients' data) are anchors: written by name, read back as the
engine's own.

The header's metadata carries a format tag, a format version and the config hash of the run.
A file that is corrupt, truncated, foreign (a pickle, say), of another version, of another
config, or that names a class outside the table is renamed to ``<name>.bad-<timestamp>`` with
a one-line warning on stderr, and the run starts fresh.

RNG states are stored as plain lists of ints, so the device never moves them: they are
restored from CPU ``uint8`` tensors whatever device the simulation is loaded onto (both
``torch.set_rng_state`` and ``torch.cuda.set_rng_state_all`` require CPU ByteTensors).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark import state_codec
from benchmark.state_codec import StateError

FORMAT = "fedmm-checkpoint"
VERSION = 3  # 3: safetensors + JSON, no pickle; 2: every hook runs under its own seed (benchmark.roles)
SUFFIX = ".ckpt.safetensors"


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


# ----------------------------------------------------------------------------- save / load
def _metadata(config_hash: str) -> dict[str, str]:
    return {"format": FORMAT, "version": str(VERSION), "config_hash": config_hash}


def save(path: Path, sim: Any, config_hash: str, anchors: dict[str, Any] | None = None) -> bool:
    """Write a checkpoint atomically; False (and a one-line warning) when the simulation holds
    something that cannot be written as JSON and tensors."""
    try:
        blob = state_codec.pack({"rng": rng_state(), "sim": sim}, anchors, _metadata(config_hash))
    except StateError as e:
        print(f"warning: checkpoint not written: {e}", file=sys.stderr)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True


def _check_metadata(meta: dict[str, str], config_hash: str) -> None:
    if meta.get("format") != FORMAT:
        raise BadCheckpoint("is not a FedMM-Bench checkpoint")
    if meta.get("version") != str(VERSION):
        raise BadCheckpoint(f"has format version {meta.get('version')!r}, expected {VERSION}")
    if meta.get("config_hash") != config_hash:
        raise BadCheckpoint(f"was written for config {meta.get('config_hash')!r}, not {config_hash!r}")


def read(path: Path, config_hash: str, map_location: Any = None,
         anchors: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Return (simulation, rng state) from ``path``; BadCheckpoint when it must not be used."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadCheckpoint(f"unreadable ({type(e).__name__}: {e.strerror or e})") from e
    try:
        meta, tree, tensors = state_codec.unpack(data)
    except StateError as e:
        raise BadCheckpoint(f"unreadable: {e}") from e
    _check_metadata(meta, config_hash)
    try:
        blob = state_codec.decode(tree, tensors, anchors, map_location)
    except StateError as e:
        raise BadCheckpoint(f"cannot be used ({e})") from e
    if not isinstance(blob, dict) or "sim" not in blob or not isinstance(blob.get("rng"), dict):
        raise BadCheckpoint("lacks the simulation or its RNG state")
    return blob["sim"], blob["rng"]


def dumps(obj: Any, anchors: dict[str, Any] | None = None) -> bytes:
    """``obj`` (a client's state: models, optimizers, tensors, containers) as bytes that
    :func:`loads` reads back the same way as a checkpoint file."""
    return state_codec.pack(obj, anchors, {"format": FORMAT, "version": str(VERSION)})


def loads(data: bytes, map_location: Any = None, anchors: dict[str, Any] | None = None) -> Any:
    """Read :func:`dumps` output; BadCheckpoint when it is malformed or names a class a
    checkpoint may not build."""
    try:
        meta, obj = state_codec.unpack_decode(data, anchors, map_location)
    except StateError as e:
        raise BadCheckpoint(str(e)) from e
    if meta.get("format") != FORMAT or meta.get("version") != str(VERSION):
        raise BadCheckpoint("is not FedMM-Bench state of this version")
    return obj


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


def load(path: Path, config_hash: str, map_location: Any = None,
         anchors: dict[str, Any] | None = None) -> Any | None:
    """The simulation saved at ``path`` with the RNGs restored, or None (fresh start)."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        sim, rng = read(path, config_hash, map_location, anchors)
        set_rng_state(rng)
    except BadCheckpoint as e:
        quarantine(path, str(e))
        return None
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # malformed RNG state
        quarantine(path, f"has a malformed RNG state ({type(e).__name__})")
        return None
    return sim


__all__ = ["BadCheckpoint", "FORMAT", "SUFFIX", "VERSION", "dumps", "load", "loads", "quarantine", "read", "rng_state",
           "rng_tensors", "save", "set_rng_state"]
