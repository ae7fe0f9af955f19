"""FedMPO Stage 1 (Sec. 3.1, App. B.1): masking, structural anchors, graph context encoding.

* Training-time masking hides some *naturally observed* modalities (r_tilde = r * r_bar) so
  that they can serve as reconstruction targets (Delta = r - r_tilde); naturally missing
  modalities are never targets.
* The structural anchor of modality m is the normalized mean of the visible neighbours'
  modality-m embeddings (Eq. 2), the topology prior of the generator.
* Each modality channel (visible embedding, else its anchor) goes through its adapter psi_m
  and one shared GNN (Eq. 3); the M channels run as one disjoint-union graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.config import ModelConfig
from benchmark.registry import BACKBONES


def training_visibility(available: Tensor, rate: float, generator: torch.Generator | None = None) -> Tensor:
    """r_tilde: each observed modality is hidden with probability ``rate``, never a node's last one.

    Why never the last one: a node whose every modality is hidden gives the generator no
    cross-modal evidence to learn from, and such nodes are what the structural fallback and
    zero imputation are for. Random numbers are drawn on the CPU so that the same seed gives
    the same masks on every device.
    """
    avail = available.bool()
    if rate <= 0:
        return avail.clone()
    draw = torch.rand(avail.shape, generator=generator).to(avail.device)
    vis = avail & (draw >= rate)
    lost_all = avail.any(1) & ~vis.any(1)
    if lost_all.any():
        # give back the observed modality with the largest draw
        score = torch.where(avail, draw, torch.full_like(draw, -1.0))
        keep = score.argmax(1)
        restore = torch.zeros_like(vis)
        restore[torch.arange(vis.shape[0], device=vis.device), keep] = True
        vis = vis | (restore & lost_all.unsqueeze(1))
    return vis


def neighbor_weights(edge_index: Tensor, num_nodes: int) -> Tensor:
    """a_ij = 1 / sqrt(deg_i deg_j) for every edge j -> i (degree-aware normalization, Eq. 2).

    Inside node i's weighted mean the deg_i factor cancels, leaving 1/sqrt(deg_j): high-degree
    neighbours, whose features are the least specific, count less.
    """
    src, dst = edge_index
    deg = torch.zeros(num_nodes, device=edge_index.device).index_add_(
        0, dst, torch.ones(dst.numel(), device=edge_index.device))
    return (deg[src] * deg[dst]).clamp_min(1.0).rsqrt()


def structural_anchor(z: Tensor, vis: Tensor, edge_index: Tensor, null: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Eq. 2: [n, M, h] anchors from the visible neighbours, and [n, M] 'has a visible neighbour'.

    A modality no neighbour shows falls back to ``null`` ([M, h], the learnable null token) or
    to zeros.
    """
    n = z.shape[0]
    src, dst = edge_index
    a = neighbor_weights(edge_index, n).unsqueeze(1) * vis[src].to(z.dtype)          # [E, M]
    num = torch.zeros_like(z).index_add_(0, dst, a.unsqueeze(-1) * z[src])          # [n, M, h]
    den = torch.zeros(n, z.shape[1], device=z.device, dtype=z.dtype).index_add_(0, dst, a)
    has = den > 0
    anchor = num / den.clamp_min(1e-12).unsqueeze(-1)
    if null is not None:
        anchor = torch.where(has.unsqueeze(-1), anchor, null.unsqueeze(0).expand_as(anchor))
    return anchor, has


def sample_neighbors(edge_index: Tensor, num_nodes: int, k: int, generator: torch.Generator | None = None) -> Tensor:
    """[n, k] random neighbours of every node (-1 pads nodes with fewer than k).

    The context bank is bounded (App. D.3: B sampled neighbours), which keeps the generator
    linear in the graph size. Draws happen on the CPU for device-independent results.
    """
    out = torch.full((num_nodes, k), -1, dtype=torch.long, device=edge_index.device)
    if k == 0 or edge_index.numel() == 0:
        return out
    src, dst = edge_index
    key = torch.rand(dst.numel(), generator=generator, dtype=torch.float64).to(edge_index.device)
    order = torch.argsort(dst.to(torch.float64) * 2.0 + key)   # by target node, random inside
    dst_s, src_s = dst[order], src[order]
    counts = torch.bincount(dst_s, minlength=num_nodes)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(dst_s.numel(), device=dst_s.device) - start[dst_s]
    keep = rank < k
    out[dst_s[keep], rank[keep]] = src_s[keep]
    return out


class GraphContextEncoder(nn.Module):
    """phi_m (modality encoders), psi_m (adapters) and the shared GNN_theta of Eq. 3.

    ``missing_skip`` (Table 7: 0.35) mixes the imputed encoder input back into the GNN output,
    h = s * psi(input) + (1 - s) * GNN(psi(input)): a residual that keeps a node's own (or
    anchor) evidence from being washed out by message passing.
    """

    def __init__(self, feature_dims: dict[str, int], model_cfg: ModelConfig, missing_skip: float,
                 impute_then_pass: bool, missing_tokens: bool) -> None:
        super().__init__()
        hidden = model_cfg.hidden
        self.modalities = list(feature_dims)
        self.encoders = nn.ModuleDict({m: nn.Linear(d, hidden) for m, d in feature_dims.items()})
        self.adapters = nn.ModuleDict({m: nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
                                       for m in feature_dims})
        self.input_dropout = nn.Dropout(model_cfg.dropout)
        self.backbone = BACKBONES.get(model_cfg.backbone)(hidden, hidden, model_cfg.layers, model_cfg.dropout)
        self.missing_skip = missing_skip
        self.impute_then_pass = impute_then_pass
        self.null_anchor = nn.Parameter(torch.zeros(len(feature_dims), hidden)) if missing_tokens else None

    def raw(self, features: dict[str, Tensor]) -> Tensor:
        """z_raw [n, M, h] for every row (rows of hidden modalities are never read as inputs)."""
        return torch.stack([self.encoders[m](features[m]) for m in self.modalities], dim=1)

    def forward(self, features: dict[str, Tensor], vis: Tensor, edge_index: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(z_target, z_raw, anchor, h), each [n, M, hidden].

        ``z_raw`` is the embedding after ``model.dropout`` (the shared backbone's input
        dropout), which every later stage reads; ``z_target`` is the same embedding without
        dropout, the clean reconstruction target of Eq. 6.
        """
        z_target = self.raw(features)
        z_raw = self.input_dropout(z_target)
        visible = vis.unsqueeze(-1)
        z_vis = z_raw * visible.to(z_raw.dtype)
        anchor, _ = structural_anchor(z_vis, vis, edge_index, self.null_anchor)
        filler = anchor if self.impute_then_pass else torch.zeros_like(anchor)
        x = torch.where(visible, z_raw, filler)
        x = torch.stack([self.adapters[m](x[:, j]) for j, m in enumerate(self.modalities)], dim=1)
        n, m_count, hidden = x.shape
        # one pass over M disjoint copies of the graph: the same GNN for every modality channel
        offsets = (torch.arange(m_count, device=edge_index.device) * n).repeat_interleave(edge_index.shape[1])
        union = edge_index.repeat(1, m_count) + offsets
        out = self.backbone(x.transpose(0, 1).reshape(m_count * n, hidden), union)
        out = out.reshape(m_count, n, hidden).transpose(0, 1)
        h = self.missing_skip * x + (1.0 - self.missing_skip) * out
        return z_target, z_raw, anchor, h
