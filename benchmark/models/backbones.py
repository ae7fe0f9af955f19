"""GNN backbones over fused node vectors: GCN, GraphSAGE (mean), GAT, and an MLP."""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from benchmark.registry import BACKBONES


class _Stack(nn.Module):
    """``layers`` message-passing layers with ReLU and dropout between them."""

    def __init__(self, convs: list[nn.Module], dropout: float, uses_edges: bool = True) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.dropout = nn.Dropout(dropout)
        self.uses_edges = uses_edges

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index) if self.uses_edges else conv(x)
            if i < len(self.convs) - 1:
                x = self.dropout(x.relu())
        return x


@BACKBONES.register("gcn")
class GCN(_Stack):
    """Kipf & Welling GCN with symmetric normalization and self-loops."""

    def __init__(self, hidden: int, out: int, layers: int, dropout: float) -> None:
        dims = [hidden] * layers + [out]
        super().__init__([GCNConv(dims[i], dims[i + 1], cached=False) for i in range(layers)], dropout)


@BACKBONES.register("sage")
class SAGE(_Stack):
    """GraphSAGE with mean aggregation, full-batch (no neighbour sampling)."""

    def __init__(self, hidden: int, out: int, layers: int, dropout: float) -> None:
        dims = [hidden] * layers + [out]
        super().__init__([SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(layers)], dropout)


@BACKBONES.register("gat")
class GAT(_Stack):
    """Graph attention network (4 heads concatenated in hidden layers, 1 head at the output)."""

    def __init__(self, hidden: int, out: int, layers: int, dropout: float, heads: int = 4) -> None:
        convs: list[nn.Module] = []
        for i in range(layers):
            last = i == layers - 1
            convs.append(GATConv(hidden, out if last else hidden // heads, heads=1 if last else heads))
        super().__init__(convs, dropout)


@BACKBONES.register("mlp")
class MLP(_Stack):
    """No message passing: a per-node MLP (structure-blind reference)."""

    def __init__(self, hidden: int, out: int, layers: int, dropout: float) -> None:
        dims = [hidden] * layers + [out]
        super().__init__([nn.Linear(dims[i], dims[i + 1]) for i in range(layers)], dropout, uses_edges=False)
