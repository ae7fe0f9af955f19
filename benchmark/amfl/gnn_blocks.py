"""GNN encoder blocks: a client's modality encoder as message passing over its own subgraph.

Ours, not the paper's: FedMBridge (§4.2) has no graph data; here an AMFL client that holds
a subgraph (``data_prep/amfl/graphs.py``) may encode a modality with ``gcn``, ``sage`` or
``gat`` layers (torch_geometric's ``GCNConv``, mean-aggregating ``SAGEConv``, ``GATConv``
with concatenated heads). A GNN block declares ``uses_edges``, so ``AMFLNet`` calls it as
``forward(xs, edge_index)`` with the client's edges; every other block never sees them.

Depth and width: ``widths`` lists the output width of each message-passing layer (depth =
its length, as for ``mlp``); each layer is followed by a ReLU. In the architecture graph
A_i every layer is one node with its family's operator (``gcn_conv``, ``sage_conv``,
``gat_conv``) and the block kind in the kind column, so the TAHN tells the families and
depths apart; the node owns all of the layer's tensors (weights, biases and GAT's
attention vectors). In the supernet baselines a GNN family is one more encoder channel
(rule 3), its layers follow rules 1-2 like an MLP's (``baselines/amfl/supernet.py``).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from benchmark.amfl.blocks import BLOCKS, WIDTHS_META, Block, LayerWidths, Op
from benchmark.errors import ConfigError


class GNNBlock(LayerWidths, Block):
    """Shared part of the GNN encoders: a stack of message-passing layers of the given widths."""

    roles = ("encoder",)
    uses_edges = True
    operator: ClassVar[str] = ""

    @dataclass
    class Options:
        widths: list[int] = field(default_factory=lambda: [32, 32], metadata=WIDTHS_META)

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self.check_widths()
        self.dims = [in_dims[0], *self.cfg.widths]
        self.layers = nn.ModuleList(self.conv(a, b) for a, b in zip(self.dims[:-1], self.dims[1:]))
        self.out_dim = self.dims[-1]

    @abstractmethod
    def conv(self, fan_in: int, fan_out: int) -> nn.Module:
        """One message-passing layer of this family."""

    def ops(self) -> list[Op]:
        return [Op(self.operator, (k - 1,) if k else (-1,),
                   tuple(f"layers.{k}.{n}" for n, _ in layer.named_parameters()), self.dims[k], self.dims[k + 1])
                for k, layer in enumerate(self.layers)]

    def forward(self, xs: list[Tensor], edge_index: Tensor) -> Tensor:  # type: ignore[override]
        x = xs[0]
        for layer in self.layers:
            x = F.relu(layer(x, edge_index))
        return x


@BLOCKS.register("gcn")
class GCNBlock(GNNBlock):
    """GCN encoder (Kipf & Welling): symmetric-normalized neighbour sum with self-loops, per layer."""

    operator = "gcn_conv"

    def conv(self, fan_in: int, fan_out: int) -> nn.Module:
        return GCNConv(fan_in, fan_out)


@BLOCKS.register("sage")
class SAGEBlock(GNNBlock):
    """GraphSAGE encoder: a node's own Linear plus a Linear of its neighbours' mean, per layer."""

    operator = "sage_conv"

    def conv(self, fan_in: int, fan_out: int) -> nn.Module:
        return SAGEConv(fan_in, fan_out, aggr="mean")


@BLOCKS.register("gat")
class GATBlock(GNNBlock):
    """GAT encoder: ``heads`` attention heads over each node's neighbours (and itself), concatenated, per layer."""

    operator = "gat_conv"

    @dataclass
    class Options:
        widths: list[int] = field(default_factory=lambda: [32, 32], metadata=WIDTHS_META)
        heads: int = field(default=2, metadata={"help": "attention heads per layer (must divide every width)",
                                                "min": 1})

    def conv(self, fan_in: int, fan_out: int) -> nn.Module:
        heads = self.cfg.heads
        if fan_out % heads:
            raise ConfigError(f"block 'gat': layer width {fan_out} is not divisible by its {heads} heads")
        return GATConv(fan_in, fan_out // heads, heads=heads)
