"""The server supernet of the supernet baselines (FedMBridge Appendix B.1.3, Figure 4).

Every client model is mapped into one supernet by the paper's three merge rules:

1. same family and depth, different widths: one network with the maximum width per layer
   (a client holds the leading rows and columns of each tensor);
2. same family, different depths: the maximum depth, a client holding the first layers of
   its own depth (its output leaves at its end layer: the paper's residual to the final
   layer);
3. different families (or fusions) at the same module: one channel per family, the
   channels' outputs added; a client holds its own channel only.

Concretely a client parameter ``encoders.<m>.<rest>`` lives at
``encoders.<m>.<family>.<rest>``, a fusion parameter at ``fusion.<kind>.<rest>`` (a
per-modality projection keyed by the modality's name, not its position), the trunk and the
head at their own names; the supernet tensor of a key is the element-wise maximum shape of
the clients' tensors there, and a client's tensor is its leading slice.

GNN encoders (``gcn``, ``sage``, ``gat``; ours, the paper has none) need no rule of their
own: a family is one more encoder channel (rule 3), its ``layers.<k>`` follow rule 2 and
their widths rule 1, like an MLP's. A GAT layer's attention vectors ([1, heads, channels])
are sliced like any tensor, so a narrower client holds the leading channels of each head;
their fan-in (for the initialization bound) is the channels per head, as in the graph A_i.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import torch
from torch import Tensor

from benchmark.amfl.model import AMFLNet
from benchmark.amfl.spec import ArchSpec
from benchmark.state_codec import state_class

SPEC_KEY = "arch.spec"


def spec_payload(client) -> dict[str, Tensor]:
    """A client's architecture as a tensor (JSON bytes): spec, classes and token widths."""
    text = json.dumps({"spec": client.arch.to_dict(), "classes": client.num_classes,
                       "tokens": client.token_dims}, sort_keys=True)
    return {SPEC_KEY: torch.tensor(list(text.encode()), dtype=torch.uint8)}


def model_from_payload(payload: dict[str, Tensor], feature_dims: dict[str, int]) -> AMFLNet:
    """The model an uploaded architecture describes (its initial weights are never used, and
    building it leaves the global RNG untouched)."""
    info = json.loads(bytes(payload[SPEC_KEY].tolist()).decode())
    spec = ArchSpec.from_dict(info["spec"])
    with torch.random.fork_rng(devices=[]):
        return AMFLNet(spec, {m: feature_dims[m] for m in spec.modalities}, info["tokens"], info["classes"])


def skeleton(payload: dict[str, Tensor], feature_dims: dict[str, int]) -> tuple[ArchSpec, dict[str, tuple[int, ...]]]:
    """(spec, parameter name -> shape) of an uploaded architecture (built, never trained)."""
    net = model_from_payload(payload, feature_dims)
    return net.spec, {k: tuple(p.shape) for k, p in net.named_parameters()}


def super_key(spec: ArchSpec, name: str) -> str:
    """Where a client parameter lives in the supernet (rules 2 and 3, see the module docstring)."""
    parts = name.split(".")
    if parts[0] == "encoders":
        family = dict(spec.encoders)[parts[1]].kind
        return ".".join(["encoders", parts[1], family, *parts[2:]])
    if parts[0] == "fusion":
        assert spec.fusion is not None
        rest = parts[1:]
        if rest[0] == "proj":
            rest = ["proj", spec.modalities[int(rest[1])], *rest[2:]]
        return ".".join(["fusion", spec.fusion.kind, *rest])
    return name


@dataclass
class ClientMap:
    """One client's parameters: name -> (supernet key, shape)."""

    entries: dict[str, tuple[str, tuple[int, ...]]]

    def slices(self, name: str) -> tuple[slice, ...]:
        return tuple(slice(0, s) for s in self.entries[name][1])


@state_class
class Supernet:
    """The merged tensors, built from every client's skeleton (rule 1: maximum shapes)."""

    def __init__(self, maps: dict[int, ClientMap], generator: torch.Generator, device: torch.device) -> None:
        shapes: dict[str, tuple[int, ...]] = {}
        for m in maps.values():
            for key, shape in m.entries.values():
                old = shapes.get(key, shape)
                if len(old) != len(shape):
                    raise ValueError(f"supernet key {key}: tensors of rank {len(old)} and {len(shape)}")
                shapes[key] = tuple(max(a, b) for a, b in zip(old, shape))
        self.maps = maps
        self.tensors = {k: _init(k, s, shapes, generator).to(device) for k, s in sorted(shapes.items())}

    @classmethod
    def from_uploads(cls, uploads: dict[int, dict[str, Tensor]], feature_dims: dict[str, int],
                     generator: torch.Generator, device: torch.device) -> "Supernet":
        maps = {}
        for cid, up in uploads.items():
            spec, shapes = skeleton(up, feature_dims)
            maps[cid] = ClientMap({n: (super_key(spec, n), s) for n, s in shapes.items()})
        return cls(maps, generator, device)

    def num_params(self) -> int:
        return sum(t.numel() for t in self.tensors.values())

    def extract(self, cid: int, tensors: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        """Client ``cid``'s slices (of ``tensors``, default the supernet), by its own names."""
        src = self.tensors if tensors is None else tensors
        m = self.maps[cid]
        return {n: src[key][m.slices(n)].clone() for n, (key, _) in m.entries.items()}

    def masks(self, cid: int) -> dict[str, Tensor]:
        """Client ``cid``'s supermask: 1 where it holds an element of a supernet tensor."""
        out = {k: torch.zeros_like(t) for k, t in self.tensors.items()}
        for n, (key, _) in self.maps[cid].entries.items():
            out[key][self.maps[cid].slices(n)] = 1.0
        return out

    def scatter(self, cid: int, params: dict[str, Tensor], into: dict[str, Tensor], weight: float = 1.0) -> None:
        """Add ``weight`` x client ``cid``'s tensors into the supernet-shaped ``into``."""
        for n, (key, _) in self.maps[cid].entries.items():
            into[key][self.maps[cid].slices(n)] += weight * params[n]

    def average(self, params: dict[int, dict[str, Tensor]], weights: dict[int, float],
                masks: dict[int, dict[str, Tensor]] | None = None) -> None:
        """Set every supernet element to the ``weights``-weighted mean of the clients that hold
        it (and, with ``masks``, did not prune it: a client's mask, 1 where kept, per tensor
        it lists); an element nobody holds keeps its value."""
        total = {k: torch.zeros_like(t) for k, t in self.tensors.items()}
        weight = {k: torch.zeros_like(t) for k, t in self.tensors.items()}
        for cid, p in params.items():
            own = {} if masks is None else masks[cid]
            held = {n: own[n] if n in own else torch.ones(s, device=p[n].device)
                    for n, (_, s) in self.maps[cid].entries.items()}
            self.scatter(cid, p, total, weights[cid])
            self.scatter(cid, held, weight, weights[cid])
        for k in self.tensors:
            kept = weight[k] > 0
            self.tensors[k] = torch.where(kept, total[k] / weight[k].clamp_min(1e-12), self.tensors[k])


def fan_in(key: str, shapes: dict[str, tuple[int, ...]]) -> int:
    """Input width of the layer a supernet tensor belongs to (a bias: its weight's)."""
    shape = shapes[key]
    if key.endswith(".bias"):
        weight = shapes.get(re.sub(r"bias$", "weight", key))
        return weight[1] if weight is not None and len(weight) == 2 else shape[0]
    return shape[1] if len(shape) == 2 else shape[-1]


def _init(key: str, shape: tuple[int, ...], shapes: dict[str, tuple[int, ...]], gen: torch.Generator) -> Tensor:
    """PyTorch's Linear init on the supernet shapes (uniform +-1/sqrt(fan_in)); position tables N(0, 0.02)."""
    if key.endswith(".pos"):
        return torch.randn(shape, generator=gen) * 0.02
    bound = 1.0 / math.sqrt(max(fan_in(key, shapes), 1))
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound
