"""What the engine receives from plugged-in code, checked where it arrives.

An algorithm hook that returns the wrong type (a first method's ``client_update`` that
forgets its return), or a dataset loader that returns a malformed graph, would otherwise fail
far away, as an ``AttributeError`` in the ledger or an index error in the builder. These
checks stop it at the boundary with one :class:`~benchmark.errors.ContractError` line that
names the component, the hook and what was expected (and what came instead).

Hook results are checked by :mod:`benchmark.roles` on every call, in process and on a
Flower node alike; the checks look at the outer types only (the mapping, its keys, that each
entry is a tensor or a mapping), never at tensor contents, so they cost nothing measurable.
A loaded graph is checked once, by the builder (``data_prep/build.py``), before it is
partitioned: shapes, dtypes and the edge index range (one pass over the edges).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from benchmark.errors import ContractError
from benchmark.federation import GraphDataset
from benchmark.safe_yaml import clip

#: what each hook must return, in words (the message's "expected ...")
EXPECTED = {
    "init_server": "the first broadcast: a dict of name -> tensor, or of client id -> such a dict",
    "aggregate": "the broadcast: a dict of name -> tensor, or of client id -> such a dict",
    "setup_aggregate": "one setup reply per client: a dict of client id -> dict of name -> tensor",
    "setup_upload": "the setup upload: a dict of name -> tensor",
    "client_update": "the upload: a dict of name -> tensor",
    "evaluate": "the scores: a dict of split -> {metric: value, 'n': size}",
}


def _kind(value: Any) -> str:
    """'None', 'a list', 'an int'... for a message."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _who(algo_cls: type) -> str:
    name = getattr(algo_cls, "registry_name", "") or algo_cls.__name__
    return f"algorithm '{name}' (class {algo_cls.__name__})"


def _fail(algo_cls: type, hook: str, got: str) -> ContractError:
    return ContractError(f"{_who(algo_cls)}: {hook} returned {got}; expected {EXPECTED[hook]}")


def _payload_problem(value: Any) -> str | None:
    """Why ``value`` is no payload (a dict of name -> tensor), or None."""
    if not isinstance(value, dict):
        return _kind(value)
    for k, v in value.items():
        if not isinstance(k, str):
            return f"a dict with the key {clip(repr(k), 60)} ({_kind(k)}, not a name)"
        if not isinstance(v, Tensor):
            return f"a dict whose entry '{clip(k, 60)}' is {_kind(v)}, not a tensor"
    return None


def check_payload(algo_cls: type, hook: str, value: Any) -> Any:
    """``value`` when it is a payload (``client_update``, ``setup_upload``), else a ContractError."""
    problem = _payload_problem(value)
    if problem is not None:
        raise _fail(algo_cls, hook, problem)
    return value


def _per_client_problem(value: dict) -> str | None:
    for cid, payload in value.items():
        problem = _payload_problem(payload)
        if problem is not None:
            return f"for client {cid} {problem}"
    return None


def check_broadcast(algo_cls: type, hook: str, value: Any) -> Any:
    """``value`` when it is a broadcast (``init_server``, ``aggregate``): one payload for all
    clients, or one per client id; else a ContractError."""
    if not isinstance(value, dict):
        raise _fail(algo_cls, hook, _kind(value))
    if value and all(isinstance(k, int) and not isinstance(k, bool) for k in value):
        problem = _per_client_problem(value)
    else:
        problem = _payload_problem(value)
    if problem is not None:
        raise _fail(algo_cls, hook, problem)
    return value


def check_replies(algo_cls: type, hook: str, value: Any, cids: Any) -> Any:
    """``value`` when it maps every client of ``cids`` to a payload (``setup_aggregate``)."""
    if not isinstance(value, dict):
        raise _fail(algo_cls, hook, _kind(value))
    missing = [c for c in cids if c not in value]
    if missing:
        raise _fail(algo_cls, hook, f"no reply for client {missing[0]}")
    problem = _per_client_problem({c: value[c] for c in cids})
    if problem is not None:
        raise _fail(algo_cls, hook, problem)
    return value


def check_scores(algo_cls: type, hook: str, value: Any) -> Any:
    """``value`` when it maps splits to mappings of metrics (``evaluate``)."""
    if not isinstance(value, dict):
        raise _fail(algo_cls, hook, _kind(value))
    for split, scores in value.items():
        if not isinstance(scores, Mapping):
            raise _fail(algo_cls, hook, f"a dict whose split '{clip(str(split), 60)}' is {_kind(scores)}, not a dict")
    return value


# --------------------------------------------------------------------------- loaded graphs


def _graph_problem(ds: Any) -> str | None:
    """What is wrong with a loaded ``GraphDataset`` (None when nothing is)."""
    feats = ds.features
    if not isinstance(feats, dict) or not feats:
        got = "an empty dict" if isinstance(feats, dict) else _kind(feats)
        return f"features is {got}; expected a dict of modality -> [N, d] float tensor"
    n = None
    for m, x in feats.items():
        if not isinstance(x, Tensor) or x.dim() != 2:
            shape = tuple(x.shape) if isinstance(x, Tensor) else _kind(x)
            return f"features['{clip(str(m), 60)}'] is {shape}; expected a [N, d] float tensor"
        if not x.dtype.is_floating_point:
            return f"features['{clip(str(m), 60)}'] has dtype {x.dtype}; expected a float tensor"
        if n is None:
            n = int(x.shape[0])
        elif int(x.shape[0]) != n:
            first = next(iter(feats))
            return (f"features['{clip(str(m), 60)}'] has {int(x.shape[0])} rows but features['{clip(str(first), 60)}'] "
                    f"has {n}; every modality needs one row per node")
    ei = ds.edge_index
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
        got = tuple(ei.shape) if isinstance(ei, Tensor) else _kind(ei)
        return f"edge_index is {got}; expected a [2, E] long tensor"
    if ei.dtype != torch.long:
        return f"edge_index has dtype {ei.dtype}; expected torch.int64 (long)"
    if ei.numel():
        lo, hi = int(ei.min()), int(ei.max())
        if lo < 0 or hi >= n:  # type: ignore[operator]
            return f"edge_index holds node id {lo if lo < 0 else hi}, outside [0, {n}) ({n} nodes)"
    y = ds.y
    if y is not None and (not isinstance(y, Tensor) or y.dim() != 1 or int(y.shape[0]) != n):
        got = f"of shape {tuple(y.shape)}" if isinstance(y, Tensor) else _kind(y)
        return f"y (labels) is {got}; expected None or a [{n}] tensor (one label per node)"
    mods = len(feats)
    av = ds.available
    if av is None:
        return f"available (the natural modality masks) is missing; expected a [{n}, {mods}] bool tensor"
    if not isinstance(av, Tensor) or tuple(av.shape) != (n, mods):
        got = f"of shape {tuple(av.shape)}" if isinstance(av, Tensor) else _kind(av)
        return f"available (the natural modality masks) is {got}; expected a [{n}, {mods}] bool tensor"
    for split in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(ds, split)
        if mask is not None and (not isinstance(mask, Tensor) or tuple(mask.shape) != (n,)):
            got = f"of shape {tuple(mask.shape)}" if isinstance(mask, Tensor) else _kind(mask)
            return f"{split} is {got}; expected None or a [{n}] bool tensor"
    return None


def check_graph(loader: str, ds: Any) -> Any:
    """``ds`` when it is a well-formed ``GraphDataset``; else a ContractError naming ``loader``
    (e.g. "dataset 'mine' (MyLoader.load)") and the first thing wrong."""
    if not isinstance(ds, GraphDataset):
        raise ContractError(f"{loader} returned {_kind(ds)}; expected a GraphDataset")
    problem = _graph_problem(ds)
    if problem is not None:
        raise ContractError(f"{loader} returned a malformed graph: {problem}")
    return ds


__all__ = ["EXPECTED", "check_broadcast", "check_graph", "check_payload", "check_replies", "check_scores"]
