"""An AMFL client's model, built from its ``ArchSpec``: encoders -> fusion -> trunk -> head.

A client that holds a graph passes its ``edge_index`` along; the model hands it to the
blocks that declare ``uses_edges`` (GNN encoders) and to no other, so a model without
graph blocks computes exactly what it did before graphs existed."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.amfl.blocks import BLOCKS, Block
from benchmark.amfl.spec import ArchSpec
from benchmark.errors import ConfigError


def _run(block: Block, xs: list[Tensor], edge_index: Tensor) -> Tensor:
    """One block on its inputs; a graph block also gets the edges."""
    return block(xs, edge_index) if block.uses_edges else block(xs)


def _no_edges(features: dict[str, Tensor]) -> Tensor:
    """An empty edge list on the features' device (rows that come without a graph)."""
    return torch.empty(2, 0, dtype=torch.long, device=next(iter(features.values())).device)


def _block(spec_block, in_dims: list[int], where: str, **kw) -> Block:
    cls = BLOCKS.get(spec_block.kind)
    try:
        return cls(in_dims, spec_block.opts(), **kw)
    except ConfigError as e:
        raise ConfigError(f"architecture spec: {where}: {e}") from None


class AMFLNet(nn.Module):
    """The personal model a spec describes. ``forward(features)`` takes the client's
    modality -> [B, d_m] dict and returns logits over its own classes."""

    def __init__(self, spec: ArchSpec, feature_dims: dict[str, int], token_dims: dict[str, int],
                 num_classes: int) -> None:
        super().__init__()
        spec.check(BLOCKS)
        missing = [m for m in spec.modalities if m not in feature_dims]
        if missing:
            raise ConfigError(f"architecture spec: encoder for modality '{missing[0]}', which the data lacks "
                              f"(it has: {', '.join(feature_dims)})")
        self.spec = spec
        self.encoders = nn.ModuleDict({
            m: _block(b, [feature_dims[m]], f"encoder of '{m}'", token_dim=token_dims.get(m))
            for m, b in spec.encoders})
        dims = [e.out_dim for e in self.encoders.values()]
        self.fusion = None if spec.fusion is None else _block(spec.fusion, dims, "fusion")
        fused = dims[0] if self.fusion is None else self.fusion.out_dim
        self.trunk = _block(spec.trunk, [fused], "trunk")
        self.head = _block(spec.head, [self.trunk.out_dim], "head", out_dim=num_classes)

    def blocks(self) -> list[tuple[str, str, Block]]:
        """(role, branch modality or '', block) in data-flow order."""
        out: list[tuple[str, str, Block]] = [("encoder", m, e) for m, e in self.encoders.items()]
        if self.fusion is not None:
            out.append(("fusion", "", self.fusion))
        return out + [("trunk", "", self.trunk), ("head", "", self.head)]

    @property
    def uses_edges(self) -> bool:
        """Whether any block reads the graph (then a row's output depends on its neighbours)."""
        return any(b.uses_edges for _, _, b in self.blocks())

    def embed(self, features: dict[str, Tensor], edge_index: Tensor | None = None) -> Tensor:
        """The trunk's output (what a distillation method may compare). ``edge_index`` is the
        graph over the rows of ``features``; rows given without one (FedDistill*'s public set:
        no upload ever carries edges) are isolated nodes to a graph block."""
        edge_index = _no_edges(features) if edge_index is None else edge_index
        hs = [_run(enc, [features[m]], edge_index) for m, enc in self.encoders.items()]
        h = hs[0] if self.fusion is None else _run(self.fusion, hs, edge_index)
        return _run(self.trunk, [h], edge_index)

    def forward(self, features: dict[str, Tensor], edge_index: Tensor | None = None) -> Tensor:
        edge_index = _no_edges(features) if edge_index is None else edge_index
        return _run(self.head, [self.embed(features, edge_index)], edge_index)

    def logits_at(self, features: dict[str, Tensor], edge_index: Tensor, idx: Tensor) -> Tensor:
        return logits_at(self, features, edge_index, idx)


def logits_at(model: nn.Module, features: dict[str, Tensor], edge_index: Tensor, idx: Tensor) -> Tensor:
    """Logits of rows ``idx`` of a client: a graph model runs over the whole client graph (a
    row's neighbours may lie outside the batch; only the rows' loss is taken), a model without
    graph blocks on the rows alone. ``model`` is an ``AMFLNet`` or a wrapper of one (a masked
    or mixed net) that says ``uses_edges`` and takes ``(features, edge_index)``."""
    if getattr(model, "uses_edges", False):
        return model(features, edge_index)[idx]
    return model({m: x[idx] for m, x in features.items()})


def flat_params(model: nn.Module) -> Tensor:
    """All parameters in ``model.parameters()`` order as one detached vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load_flat(model: nn.Module, vec: Tensor) -> None:
    """Copy a flat vector into the parameters, in place (keeps optimizer references)."""
    n = sum(p.numel() for p in model.parameters())
    if vec.numel() != n:
        raise ValueError(f"flat vector has {vec.numel()} values, the model {n} parameters")
    with torch.no_grad():
        i = 0
        for p in model.parameters():
            p.copy_(vec[i:i + p.numel()].view_as(p))
            i += p.numel()
