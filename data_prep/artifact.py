"""A federation artifact's identity and storage, for every kind of dataset (graph, KG): the
component lookup and options that enter its hash, the hash itself (with and without the
seed), where it lives in the cache, and the atomic, pickle-free write and read."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark import registry as R
from benchmark import state_codec
from benchmark.config import ComponentConfig, RunConfig, component_config

ARTIFACT_VERSION = 2  # 2: client-level masking rounds halves up


def resolve_component(registry: R.Registry, section: ComponentConfig, where: str) -> tuple[type, Any]:
    """The component class and its validated Config (plugins are imported only if needed)."""
    if section.name not in registry:
        R.load_plugins()
    cls = registry.get(section.name)
    return cls, component_config(registry, section, where)


def component_params(cfg_obj: Any) -> dict[str, Any]:
    """A component's full options (defaults included), for hashing."""
    if cfg_obj is None:
        return {}
    if dataclasses.is_dataclass(cfg_obj):
        return dataclasses.asdict(cfg_obj)
    return dict(vars(cfg_obj))


def artifact_keys(
    fingerprint: str, cfg: RunConfig, part_params: dict[str, Any], mask_params: dict[str, Any]
) -> tuple[str, str]:
    """(artifact hash, artifact recipe) of the dataset with ``fingerprint`` under ``cfg``'s
    partition, masking, split and normalization: the recipe is the same hash without the seed."""
    recipe = {
        "version": ARTIFACT_VERSION,
        "dataset": fingerprint,
        "partition": {"name": cfg.partition.name, "num_clients": cfg.partition.num_clients, "params": part_params},
        "missing": {"name": cfg.missing.name, "params": mask_params},
        "split": [cfg.split.train, cfg.split.val, cfg.split.test],
        "normalize": cfg.dataset.normalize,
    }

    def digest(obj: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

    return digest({**recipe, "seed": cfg.seed}), digest(recipe)


def artifact_path(cfg: RunConfig, key: str) -> Path:
    return Path(cfg.output.cache_dir) / "artifacts" / f"{key}.safetensors"


def plain(obj: Any) -> Any:
    """Numpy scalars and arrays -> Python / torch, so the artifact loads with weights_only."""
    if isinstance(obj, dict):
        return {k if isinstance(k, (str, int)) else str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, int, float, bool, torch.Tensor)):
        return obj
    return str(obj)


def save_atomic(obj: dict[str, Any], path: Path) -> None:
    """Write ``obj`` as safetensors + JSON (no pickle: :mod:`benchmark.state_codec`) to a
    temporary file in the same folder, then rename it over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = state_codec.pack(obj)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_cached(path: Path) -> Any:
    """What :func:`save_atomic` wrote (JSON values and tensors only; nothing is unpickled)."""
    return state_codec.unpack_decode(path.read_bytes())[1]


__all__ = ["ARTIFACT_VERSION", "artifact_keys", "artifact_path", "component_params", "plain", "read_cached",
           "resolve_component", "save_atomic"]
