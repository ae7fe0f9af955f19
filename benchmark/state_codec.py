"""A simulation's object graph as JSON plus tensors, and back, with no pickle.

Why: a checkpoint or a Flower client state is a file someone else may have written. Reading
it must not import a module, call a constructor, ``__reduce__`` or ``__setstate__`` chosen
by the file, or resolve a dotted name through module attributes. So reading is two steps:

1. :func:`unpack` turns the bytes into JSON values (``json.loads``) and tensors
   (safetensors): nothing else is built, nothing is imported;
2. :func:`decode` rebuilds the objects from those plain values, and the only classes it can
   build are the ones in :func:`state_types`, a table the *code* makes from classes already
   imported: nn.Module, optimizer and LR-scheduler classes of torch, PyG and this project,
   and the dataclasses and ``@state_class`` classes (algorithms and tasks among them) defined
   in this project's packages. An object is built with ``cls.__new__`` and its ``__dict__`` filled with the
   decoded values; a value is only ever data (JSON, a tensor, another such object, one of a
   few builtin containers, or a class of that table), never a function.

Objects the code owns and rebuilds itself (the run's context, its config, the clients' data)
are *anchors*: they are written as their anchor name and read back as the code's own object,
so a checkpoint never carries a copy of the federation.

Tensors keep their dtype, shape, ``requires_grad`` and whether they were parameters;
identity is kept across the whole graph (an optimizer's state stays keyed by the very
parameters of its model). Two different tensors that were views of one storage come back
as two tensors. Tensors that lived on an accelerator are read onto ``device``; CPU tensors
stay on the CPU.

PyG's message-passing layers keep an ``Inspector`` of their class's method signatures
(annotations such as ``Optional[Tensor]``); it is not written but rebuilt from the layer's
class exactly as ``MessagePassing.__init__`` does (PyG 2.8), and a test compares the two.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import torch

PROJECT_PACKAGES = frozenset({"benchmark", "baselines", "methods", "data_prep"})
STATE_KEY = "__state__"
MAX_DEPTH = 200  # nesting of the JSON tree; deeper is a crafted file

_CLASS_MARK = "__fedmm_state_class__"
_BUILTIN_FACTORIES: dict[str, Callable[[], Any] | None] = {
    "none": None, "dict": dict, "list": list, "int": int, "float": float, "set": set}
_FACTORY_NAMES = {v: k for k, v in _BUILTIN_FACTORIES.items() if v is not None}
_TORCH_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


class StateError(Exception):
    """The graph cannot be written (an unknown type), or the data cannot be read back."""


def state_class(cls: type) -> type:
    """Mark a project class that is neither a dataclass nor a module as checkpoint state
    (its subclasses inherit the mark)."""
    setattr(cls, _CLASS_MARK, True)
    return cls


# ----------------------------------------------------------------------------- type table
def type_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _subclasses(root: type) -> list[type]:
    out, todo = [], [root]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _project_classes() -> list[type]:
    """Classes *defined* in this project's loaded modules (nested ones too), never a class
    a project module merely imported."""
    out: list[type] = []
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".", 1)[0] not in PROJECT_PACKAGES:
            continue
        todo = [v for v in vars(mod).values() if isinstance(v, type) and v.__module__ == name]
        while todo:
            c = todo.pop()
            out.append(c)
            todo.extend(v for v in vars(c).values()
                        if isinstance(v, type) and v.__module__ == name and v.__qualname__.startswith(c.__qualname__ + "."))
    return out


def _is_project(cls: type) -> bool:
    return cls.__module__.split(".", 1)[0] in PROJECT_PACKAGES


def state_types() -> dict[str, type]:
    """Every class :func:`decode` may build, by :func:`type_key` (rebuilt on each call, so
    classes of plugins imported since are included; a file can never add to it)."""
    from torch.optim.lr_scheduler import LRScheduler

    tops = PROJECT_PACKAGES | {"torch", "torch_geometric"}
    table: dict[str, type] = {}
    for root in (torch.nn.Module, torch.optim.Optimizer, LRScheduler):
        for c in _subclasses(root):
            if c.__module__.split(".", 1)[0] in tops and "<locals>" not in c.__qualname__:
                table[type_key(c)] = c
    for c in _project_classes():
        if dataclasses.is_dataclass(c) or getattr(c, _CLASS_MARK, False) or issubclass(c, enum.Enum):
            table[type_key(c)] = c
    return table


# ----------------------------------------------------------------------------- encode
class _Encoder:
    def __init__(self, anchors: dict[str, Any], types: dict[str, type]) -> None:
        self.anchors = {id(v): k for k, v in anchors.items()}
        self.types = types
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps encoded objects alive so ids stay unique
        self.tensors: dict[str, torch.Tensor] = {}

    def _id(self, obj: Any) -> int:
        n = len(self.memo)
        self.memo[id(obj)] = n
        self.keep.append(obj)
        return n

    def enc(self, obj: Any, path: str) -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if type(obj) is int:
            return obj
        if type(obj) is float:
            return obj if math.isfinite(obj) else {"$float": repr(obj)}
        if id(obj) in self.anchors:
            return {"$anchor": self.anchors[id(obj)]}
        if id(obj) in self.memo:
            return {"$ref": self.memo[id(obj)]}
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj, path)
        if isinstance(obj, torch.dtype):
            return {"$dtype": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.device):
            return {"$device": obj.type}
        if isinstance(obj, torch.Size):
            return {"$size": list(obj)}
        if isinstance(obj, enum.Enum):
            return {"$enum": self._key(type(obj), path), "name": obj.name}
        if isinstance(obj, type):
            return {"$class": self._key(obj, path)}
        if type(obj) is bytes:
            return {"$bytes": obj.hex()}
        if type(obj) is tuple:
            return {"$tuple": [self.enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if type(obj) is frozenset:
            return {"$frozenset": [self.enc(v, f"{path}{{}}") for v in obj]}
        if type(obj) is list:
            n = self._id(obj)
            return {"$list": [self.enc(v, f"{path}[{i}]") for i, v in enumerate(obj)], "$id": n}
        if type(obj) is set:
            n = self._id(obj)
            return {"$set": [self.enc(v, f"{path}{{}}") for v in obj], "$id": n}
        if type(obj) is collections.deque:
            n = self._id(obj)
            return {"$deque": [self.enc(v, f"{path}[{i}]") for i, v in enumerate(obj)], "maxlen": obj.maxlen, "$id": n}
        if type(obj) in (dict, collections.OrderedDict, collections.defaultdict):
            return self._dict(obj, path)
        if _is_pyg_inspector(obj):
            return {"$inspector": self._key(obj._cls, path)}
        return self._object(obj, path)

    def _key(self, cls: type, path: str) -> str:
        key = type_key(cls)
        if self.types.get(key) is not cls:
            raise StateError(f"{path}: {key} is not a state class (add @state_class or make it a dataclass)")
        return key

    def _dict(self, obj: dict, path: str) -> dict:
        n = self._id(obj)
        out: dict[str, Any] = {"$id": n, "items": [[self.enc(k, f"{path}{{key}}"), self.enc(v, f"{path}[{k!r}]")]
                                                  for k, v in obj.items()]}
        if isinstance(obj, collections.defaultdict):
            factory = obj.default_factory
            if factory is not None and factory not in _FACTORY_NAMES:
                raise StateError(f"{path}: a defaultdict whose factory is {factory!r} cannot be written")
            out["$dict"] = "defaultdict"
            out["factory"] = "none" if factory is None else _FACTORY_NAMES[factory]
        else:
            out["$dict"] = "ordered" if type(obj) is collections.OrderedDict else "dict"
        return out

    def _tensor(self, t: torch.Tensor, path: str) -> dict:
        n = self._id(t)
        key = f"t{n}"
        out: dict[str, Any] = {"$tensor": key, "$id": n, "dev": t.device.type, "grad": bool(t.requires_grad),
                               "param": isinstance(t, torch.nn.Parameter)}
        data = t.detach()
        if data.layout == torch.sparse_coo:
            data = data.coalesce()
            self.tensors[key + ".i"] = data.indices().cpu().clone().contiguous()
            data, out["sparse"] = data.values(), list(t.shape)
        elif data.layout != torch.strided:
            raise StateError(f"{path}: a tensor of layout {data.layout} cannot be written")
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise StateError(f"{path}: a tensor subclass {type(t).__name__} cannot be written")
        if data.dtype not in _TORCH_DTYPES.values():
            raise StateError(f"{path}: a tensor of dtype {data.dtype} cannot be written")
        if data.is_complex():
            out["complex"] = True
            data = torch.view_as_real(data)
        self.tensors[key] = data.cpu().clone().contiguous()
        return out

    def _object(self, obj: Any, path: str) -> dict:
        key = self._key(type(obj), path)
        if not hasattr(obj, "__dict__"):
            raise StateError(f"{path}: {key} keeps no __dict__ and cannot be written")
        n = self._id(obj)
        attrs = dict(vars(obj))
        if _is_message_passing(obj):
            attrs.pop("inspector", None)  # rebuilt from the class on read
        return {"$obj": key, "$id": n, "attrs": {k: self.enc(v, f"{path}.{k}") for k, v in attrs.items()}}


def _is_pyg_inspector(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__ == "torch_geometric.inspector" and cls.__qualname__ == "Inspector"


def _is_message_passing(obj: Any) -> bool:
    mp = sys.modules.get("torch_geometric.nn.conv.message_passing")
    return mp is not None and isinstance(obj, mp.MessagePassing)


def encode(obj: Any, anchors: dict[str, Any] | None = None) -> tuple[Any, dict[str, torch.Tensor]]:
    """(JSON tree, tensors) of ``obj``; StateError naming the path of what cannot be written."""
    e = _Encoder(anchors or {}, state_types())
    tree = e.enc(obj, "state")
    return tree, e.tensors


def pack(obj: Any, anchors: dict[str, Any] | None = None, metadata: dict[str, str] | None = None) -> bytes:
    """``obj`` as one safetensors blob: its tensors, and its JSON tree as a byte tensor."""
    from safetensors.torch import save

    tree, tensors = encode(obj, anchors)
    text = json.dumps(tree, allow_nan=False, separators=(",", ":")).encode("utf-8")
    tensors[STATE_KEY] = torch.frombuffer(bytearray(text), dtype=torch.uint8) if text else torch.zeros(0, dtype=torch.uint8)
    return save(tensors, metadata=metadata)


# ----------------------------------------------------------------------------- read
def _reject_constant(name: str) -> Any:
    raise StateError(f"the state holds the non-JSON constant {name}")


def unpack(blob: bytes) -> tuple[dict[str, str], Any, dict[str, torch.Tensor]]:
    """(metadata, JSON tree, tensors) of a :func:`pack` blob; only JSON values and CPU tensors
    are built. StateError when it is not one."""
    from safetensors.torch import load

    try:
        tensors = load(bytes(blob))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types on a bad header
        raise StateError(f"not a safetensors file ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from e
    metadata = _metadata(blob)
    raw = tensors.pop(STATE_KEY, None)
    if raw is None or raw.dtype != torch.uint8 or raw.dim() != 1:
        raise StateError("holds no FedMM-Bench state")
    try:
        tree = json.loads(bytes(raw.numpy()).decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError as e:
        raise StateError("its state is nested too deeply") from e
    except (UnicodeDecodeError, ValueError) as e:
        raise StateError(f"its state is not valid JSON ({str(e)[:120]})") from e
    return metadata, tree, tensors


def _metadata(blob: bytes) -> dict[str, str]:
    """The header's ``__metadata__`` (safetensors validated the header already)."""
    n = int.from_bytes(bytes(blob[:8]), "little")
    header = json.loads(bytes(blob[8:8 + n]).decode("utf-8"))
    meta = header.get("__metadata__") or {}
    return {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor], anchors: dict[str, Any], types: dict[str, type],
                 device: torch.device | str | None) -> None:
        self.tensors = tensors
        self.anchors = anchors
        self.types = types
        self.device = torch.device(device) if device is not None else None
        self.memo: dict[int, Any] = {}

    def _remember(self, node: dict, obj: Any) -> Any:
        n = node.get("$id")
        if not isinstance(n, int) or n in self.memo:
            raise StateError(f"bad or repeated object id {n!r}")
        self.memo[n] = obj
        return obj

    def _class(self, key: Any) -> type:
        if not isinstance(key, str) or key not in self.types:
            raise StateError(f"names the class {str(key)[:120]!r}, which a checkpoint may not build")
        return self.types[key]

    def dec(self, node: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise StateError("its state is nested too deeply")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            raise StateError("a bare JSON list where a tagged value was expected")
        if not isinstance(node, dict) or not node:
            raise StateError("a malformed value")
        d = depth + 1
        tag = next(iter(node))
        if "$obj" in node:
            return self._object(node, d)
        if "$dict" in node:
            return self._dict(node, d)
        if "$tensor" in node:
            return self._tensor(node)
        if "$ref" in node:
            if node["$ref"] not in self.memo:
                raise StateError(f"refers to unknown object {node['$ref']!r}")
            return self.memo[node["$ref"]]
        if "$anchor" in node:
            if node["$anchor"] not in self.anchors:
                raise StateError(f"refers to {str(node['$anchor'])[:60]!r}, which this run does not own")
            return self.anchors[node["$anchor"]]
        if "$list" in node:
            out: list = self._remember(node, [])
            out.extend(self.dec(v, d) for v in _seq(node["$list"]))
            return out
        if "$set" in node:
            s: set = self._remember(node, set())
            s.update(self.dec(v, d) for v in _seq(node["$set"]))
            return s
        if "$deque" in node:
            maxlen = node.get("maxlen")
            if maxlen is not None and not isinstance(maxlen, int):
                raise StateError("a deque with a bad maxlen")
            q: collections.deque = self._remember(node, collections.deque(maxlen=maxlen))
            q.extend(self.dec(v, d) for v in _seq(node["$deque"]))
            return q
        if "$tuple" in node:
            return tuple(self.dec(v, d) for v in _seq(node["$tuple"]))
        if "$frozenset" in node:
            return frozenset(self.dec(v, d) for v in _seq(node["$frozenset"]))
        if "$float" in node:
            if node["$float"] not in ("inf", "-inf", "nan"):
                raise StateError("a malformed float")
            return float(node["$float"])
        if "$bytes" in node:
            try:
                return bytes.fromhex(node["$bytes"])
            except (TypeError, ValueError) as e:
                raise StateError("malformed bytes") from e
        if "$dtype" in node:
            if node["$dtype"] not in _TORCH_DTYPES:
                raise StateError(f"an unknown dtype {str(node['$dtype'])[:40]!r}")
            return _TORCH_DTYPES[node["$dtype"]]
        if "$device" in node:
            kind = node["$device"]
            if kind == "cpu":
                return torch.device("cpu")
            if not isinstance(kind, str) or kind not in ("cuda", "mps", "xpu", "meta"):
                raise StateError("an unknown device")
            return self.device or torch.device(kind)
        if "$size" in node:
            return torch.Size([int(v) for v in _seq(node["$size"])])
        if "$class" in node:
            return self._class(node["$class"])
        if "$enum" in node:
            cls = self._class(node["$enum"])
            if not issubclass(cls, enum.Enum) or node.get("name") not in cls.__members__:
                raise StateError("a malformed enum value")
            return cls[node["name"]]
        if "$inspector" in node:
            raise StateError("an inspector outside a message-passing layer")
        raise StateError(f"an unknown tag {str(tag)[:40]!r}")

    def _dict(self, node: dict, d: int) -> dict:
        kind = node["$dict"]
        if kind == "dict":
            out: dict = {}
        elif kind == "ordered":
            out = collections.OrderedDict()
        elif kind == "defaultdict":
            factory = node.get("factory")
            if factory not in _BUILTIN_FACTORIES:
                raise StateError(f"a defaultdict factory {str(factory)[:40]!r} is not allowed")
            out = collections.defaultdict(_BUILTIN_FACTORIES[factory])
        else:
            raise StateError("a malformed dict")
        self._remember(node, out)
        for item in _seq(node.get("items")):
            if not isinstance(item, list) or len(item) != 2:
                raise StateError("a malformed dict item")
            key = self.dec(item[0], d)
            try:
                out[key] = self.dec(item[1], d)
            except TypeError as e:  # an unhashable key
                raise StateError("a dict key that cannot be a key") from e
        return out

    def _tensor(self, node: dict) -> torch.Tensor:
        key = node["$tensor"]
        if not isinstance(key, str) or key not in self.tensors:
            raise StateError(f"refers to a missing tensor {str(key)[:40]!r}")
        t = self.tensors[key]
        if node.get("complex"):
            if t.dim() == 0 or t.shape[-1] != 2 or not t.is_floating_point():
                raise StateError("a malformed complex tensor")
            t = torch.view_as_complex(t.contiguous())
        if "sparse" in node:
            idx = self.tensors.get(key + ".i")
            try:
                t = torch.sparse_coo_tensor(idx, t, [int(s) for s in _seq(node["sparse"])], check_invariants=True)
            except (RuntimeError, TypeError, ValueError) as e:
                raise StateError("a malformed sparse tensor") from e
        if node.get("dev") not in (None, "cpu"):
            t = t.to(self.device or node["dev"])
        if node.get("param"):
            t = torch.nn.Parameter(t, requires_grad=bool(node.get("grad")))
        elif node.get("grad") and t.is_floating_point():
            t.requires_grad_(True)
        return self._remember(node, t)

    def _object(self, node: dict, d: int) -> Any:
        cls = self._class(node["$obj"])
        obj = cls.__new__(cls)
        self._remember(node, obj)
        attrs = node.get("attrs")
        if not isinstance(attrs, dict):
            raise StateError("an object without attributes")
        values = {str(k): self.dec(v, d) for k, v in attrs.items()}
        obj.__dict__.update(values)  # no __setattr__ or __setstate__ of the class runs
        if _is_message_passing(obj):
            _rebuild_inspector(obj)
        elif isinstance(obj, torch.optim.Optimizer):
            obj._patch_step_function()  # torch's own class-level step hook, as its __setstate__ does
        return obj


def _seq(value: Any) -> list:
    if not isinstance(value, list):
        raise StateError("a malformed sequence")
    return value


def _rebuild_inspector(layer: Any) -> None:
    """A message-passing layer's Inspector, built as ``MessagePassing.__init__`` builds it."""
    from torch_geometric.inspector import Inspector

    insp = Inspector(type(layer))
    insp.inspect_signature(layer.message)
    insp.inspect_signature(layer.aggregate, exclude=[0, "aggr"])
    insp.inspect_signature(layer.message_and_aggregate, [0])
    insp.inspect_signature(layer.update, exclude=[0])
    insp.inspect_signature(layer.edge_update)
    if getattr(layer, "_explain", None) is True:
        insp.inspect_signature(layer.explain_message, exclude=[0])
    layer.__dict__["inspector"] = insp
    layer._set_jittable_templates()


def decode(tree: Any, tensors: dict[str, torch.Tensor], anchors: dict[str, Any] | None = None,
           device: torch.device | str | None = None) -> Any:
    """The object graph of :func:`encode`'s output; StateError when the data is malformed or
    names a class outside :func:`state_types`."""
    try:
        return _Decoder(tensors, anchors or {}, state_types(), device).dec(tree)
    except StateError:
        raise
    except (KeyError, TypeError, ValueError, RecursionError, RuntimeError, OverflowError) as e:
        raise StateError(f"malformed state ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from e


def unpack_decode(blob: bytes, anchors: dict[str, Any] | None = None,
                  device: torch.device | str | None = None) -> tuple[dict[str, str], Any]:
    """(metadata, object graph) of a :func:`pack` blob."""
    metadata, tree, tensors = unpack(blob)
    return metadata, decode(tree, tensors, anchors, device)


__all__ = ["StateError", "decode", "encode", "pack", "state_class", "state_types", "type_key", "unpack",
           "unpack_decode"]
