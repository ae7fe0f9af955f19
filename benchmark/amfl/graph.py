"""The architecture graph A_i = (V_i, E_i, Z_i^(0)) of §4.2, derived from a built model.

Nodes: one per modality input and one per operator the blocks declare (``Block.ops``);
edges follow the data flow, from an operator's inputs to it. Node features (categorical,
one column each): role (input / encoder / fusion / trunk / head), block kind, operator
type, branch (which modality's encoder, or the shared fusion branch), relative layer level
within the branch, and the fan-in and fan-out widths as log2 shape scales (the paper ranks
shape sizes into scales with a lookup table and gives non-parametric and input nodes a
held-out scale: 0 here). A GNN encoder layer (``gcn``, ``sage``, ``gat``) is one node
with its own kind and operator (``gcn_conv``, ``sage_conv``, ``gat_conv``), like a Linear. The paper traces autograd of a dummy forward pass; walking the
blocks gives the same nodes without running the model and keeps every parameter tied to
the node that owns it (``param_node``), which the hypernetworks need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmark.amfl.blocks import BLOCKS, GRAPH_OPERATORS, OPERATORS, ROLES

#: columns of ``ArchGraph.features``
FEATURES = ("role", "kind", "operator", "branch", "level", "fan_in", "fan_out")
MAX_LEVEL = 7
MAX_SCALE = 15


def shape_scale(width: int) -> int:
    """0 for no width (held-out scale), else 1 + floor(log2 width), capped."""
    return 0 if width <= 0 else min(MAX_SCALE, 1 + int(math.log2(width)))


def vocab_sizes(num_modalities: int) -> tuple[int, ...]:
    """Number of categories of each feature column (for embedding tables)."""
    return (len(ROLES), len(BLOCKS.names()) + 1, len(OPERATORS), num_modalities + 1, MAX_LEVEL + 1,
            MAX_SCALE + 1, MAX_SCALE + 1)


def kind_ids() -> dict[str, int]:
    """Block kind -> its category (1-based; 0 = an input node): the kinds that ignore the
    graph in name order, then the graph kinds (``uses_edges``) in name order. Graph kinds
    and graph operators thus take the last categories of their columns, which
    ``graph_categories`` names, and every other kind keeps the id it had before graphs."""
    names = BLOCKS.names()
    order = [k for k in names if not BLOCKS.get(k).uses_edges] + [k for k in names if BLOCKS.get(k).uses_edges]
    return {k: i + 1 for i, k in enumerate(order)}


def graph_categories() -> tuple[int, ...]:
    """Per feature column, how many of its last categories belong to graph blocks (GNN kinds
    and their operators): the TAHN draws their embeddings from a stream of their own, so a
    population without graph blocks gets the initialization it had before they existed."""
    graph_kinds = sum(1 for k in BLOCKS.names() if BLOCKS.get(k).uses_edges)
    return (0, graph_kinds, len(GRAPH_OPERATORS), 0, 0, 0, 0)


@dataclass
class ArchGraph:
    """Nodes, edges and per-parameter bookkeeping of one client architecture."""

    features: Tensor      # [V, 7] long
    edges: Tensor         # [2, E] long, source -> target along the data flow
    param_node: Tensor    # [P] long: the node owning each tensor of model.parameters()
    param_shape: Tensor   # [P, 2] long: (numel, fan_in) of each parameter tensor

    @property
    def num_nodes(self) -> int:
        return int(self.features.shape[0])

    def payload(self, prefix: str = "arch.") -> dict[str, Tensor]:
        """What a client uploads so the server knows its architecture (Algorithm 1, init)."""
        return {prefix + "features": self.features, prefix + "edges": self.edges,
                prefix + "param_node": self.param_node, prefix + "param_shape": self.param_shape}

    @classmethod
    def from_payload(cls, payload: dict[str, Tensor], prefix: str = "arch.") -> "ArchGraph":
        return cls(*(payload[prefix + k].long().cpu() for k in ("features", "edges", "param_node", "param_shape")))


def build_graph(model: nn.Module, modalities: list[str]) -> ArchGraph:
    """A_i of an ``AMFLNet`` (``modalities``: the federation's modality vocabulary)."""
    kinds = kind_ids()
    rows: list[list[int]] = []
    edges: list[tuple[int, int]] = []
    owner: dict[int, int] = {}
    inputs = {}
    for m in model.encoders:
        inputs[m] = len(rows)
        rows.append([ROLES.index("input"), 0, OPERATORS.index("input"), modalities.index(m) + 1, 0, 0, 0])
    level = {m: 0 for m in modalities} | {"": 0}
    previous: list[int] = []          # output node of the previous stage(s)
    encoder_out: list[int] = []
    for role, branch, block in model.blocks():
        if role == "encoder":
            block_inputs = [inputs[branch]]
        elif role == "fusion":
            block_inputs = encoder_out
        else:
            block_inputs = previous if previous else encoder_out
        base = len(rows)
        params = dict(block.named_parameters())
        for op in block.ops():
            nid = len(rows)
            for p in op.preds:
                edges.append((block_inputs[-p - 1] if p < 0 else base + p, nid))
            lvl = 0
            if op.params:
                level[branch] += 1
                lvl = min(level[branch], MAX_LEVEL)
            rows.append([ROLES.index(role), kinds[block.registry_name], OPERATORS.index(op.op),
                         modalities.index(branch) + 1 if branch else 0, lvl, shape_scale(op.fan_in),
                         shape_scale(op.fan_out)])
            for name in op.params:
                owner[id(params[name])] = nid
        out = len(rows) - 1
        if role == "encoder":
            encoder_out.append(out)
        previous = [out]
    plist = list(model.parameters())
    orphans = [i for i, p in enumerate(plist) if id(p) not in owner]
    if orphans:
        raise ValueError(f"{len(orphans)} parameter tensor(s) belong to no operator of the graph")
    shapes = []
    for p in plist:
        shapes.append((p.numel(), p.shape[1] if p.dim() == 2 else _fan_in_of(model, p)))
    return ArchGraph(torch.tensor(rows, dtype=torch.long),
                     torch.tensor(edges, dtype=torch.long).t().reshape(2, -1),
                     torch.tensor([owner[id(p)] for p in plist], dtype=torch.long),
                     torch.tensor(shapes, dtype=torch.long))


def _fan_in_of(model: nn.Module, p: Tensor) -> int:
    """Fan-in of a parameter that is not a weight matrix: that of the layer it is the bias
    of (an ``nn.Linear``, or a torch_geometric layer, which names it ``in_channels``), else
    its last dimension (a position table's width, a GAT head's channels)."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and mod.bias is p:
            return mod.in_features
        if getattr(mod, "bias", None) is p and isinstance(getattr(mod, "in_channels", None), int):
            return int(mod.in_channels)
    return p.shape[-1]
