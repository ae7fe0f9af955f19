"""The FedMPO client model: Stages 1-3, then the post-completion refinement and task head.

``forward(client)`` returns the task head's output, like ``MultimodalGNN``, so every task
(node_cls, link_pred, retrieval) drives it unchanged. In training mode each forward also
logs its auxiliary terms (reconstruction, alignment, routing, and the reliability
statistics), which the algorithm adds to the task loss and summarizes for the server.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from methods.fedmpo.config import FedMPOConfig
from methods.fedmpo.encoding import GraphContextEncoder, sample_neighbors, training_visibility
from methods.fedmpo.generation import TopologyAwareGenerator, alignment_loss, normalized_error, reconstruction_loss
from methods.fedmpo.moe import MissingAwareMoE, SimpleFusion

EVAL_BANK_SEED = 0   # evaluation samples the context bank from a fixed stream: same scores every time


@dataclass
class AuxTerms:
    """What one training forward pass adds to the objective and to the reliability statistics."""

    rec: Tensor            # L_rec (0 without AGMG)
    align: Tensor          # L_align (0 without alignment)
    route: Tensor          # L_route (0 without MoE)
    unc_sum: float         # sum of u over generated slots (r_tilde = 0) ...
    unc_count: float       # ... and their number
    err_sum: float         # sum of NormErr over artificially masked slots ...
    err_count: float       # ... and their number


class FedMPONet(nn.Module):
    """Feature/graph context encoding -> AGMG -> missing-aware MoE -> SAGE refinement -> head."""

    def __init__(self, feature_dims: dict[str, int], out_dim: int, model_cfg: ModelConfig, cfg: FedMPOConfig) -> None:
        super().__init__()
        hidden = model_cfg.hidden
        self.cfg = cfg
        self.modalities = list(feature_dims)
        self.context = GraphContextEncoder(feature_dims, model_cfg, cfg.missing_skip, cfg.impute_then_pass,
                                           cfg.missing_tokens)
        m_count = len(self.modalities)
        self.generator = TopologyAwareGenerator(hidden, m_count, cfg.attn_heads) if cfg.use_agmg else None
        self.align = nn.Linear(hidden, hidden, bias=False) if cfg.use_align else None   # W_al
        if cfg.use_moe:
            self.moe: nn.Module = MissingAwareMoE(hidden, cfg.conditional_routing, cfg.router_temperature,
                                                  cfg.uniform_floor, cfg.uncertainty_clamp, cfg.lambda_bal)
        else:
            self.fusion = SimpleFusion(hidden)
        self.refine = SAGEConv(hidden, hidden, aggr="mean")                                 # Eq. 12
        self.refine_norm = nn.LayerNorm(hidden)
        self.head_dropout = nn.Dropout(cfg.head_dropout)
        self.head = nn.Linear(hidden, out_dim)
        self.gamma = cfg.gamma(0)
        self._log: list[AuxTerms] = []

    # ------------------------------------------------------------------ bookkeeping
    def set_round(self, rnd: int) -> None:
        """gamma_t of the round being trained (or evaluated)."""
        self.gamma = self.cfg.gamma(rnd)

    def pop_aux(self) -> list[AuxTerms]:
        """The aux terms logged since the last call (and forget them)."""
        out, self._log = self._log, []
        return out

    # ------------------------------------------------------------------ forward
    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        out, aux = self.forward_full(client, features)
        if self.training:
            self._log.append(aux)
        return out

    def forward_full(self, client: ClientData, features: dict[str, Tensor] | None = None) -> tuple[Tensor, AuxTerms]:
        feats = features if features is not None else client.features
        avail = client.available.bool()
        n, m_count = avail.shape
        edges = client.edge_index
        if self.training:
            vis = training_visibility(avail, self.cfg.mask_rate)
            bank_gen = None
        else:
            vis = avail
            bank_gen = torch.Generator().manual_seed(EVAL_BANK_SEED)
        delta = avail & ~vis                                                   # Eq. 1

        z_target, z_raw, anchor, h = self.context(feats, vis, edges)           # Stage 1
        h_excl = (h.sum(1, keepdim=True) - h) / (m_count - 1) if m_count > 1 else torch.zeros_like(h)
        h_str = h.mean(1)

        if self.generator is not None:                                         # Stage 2
            neighbors = sample_neighbors(edges, n, self.cfg.bank_neighbors, bank_gen)
            z_hat = self.generator(h, h_excl, anchor, vis, neighbors, self.gamma)
            rec = reconstruction_loss(z_hat, z_target, delta)
        else:
            z_hat = torch.zeros_like(z_raw)
            rec = z_raw.sum() * 0.0
        if self.cfg.zero_impute_full:
            z_hat = z_hat * vis.any(1).to(z_hat.dtype).view(n, 1, 1)
        z_tilde = torch.where(vis.unsqueeze(-1), z_raw, z_hat)
        align = alignment_loss(z_tilde, vis, self.align) if self.align is not None else rec * 0.0
        norm_err = normalized_error(z_hat, z_target)

        if self.cfg.use_moe:                                                   # Stage 3
            rho_client = 1.0 - avail.to(h.dtype).mean()
            mo = self.moe(z_raw, z_hat, h_excl, anchor, h_str, vis, delta, norm_err, rho_client)
            fused, u, route = mo.fused, mo.uncertainty, mo.route_loss
        else:
            fused, u, route = self.fusion(z_tilde), torch.zeros_like(norm_err), rec * 0.0

        refined = self.refine_norm(fused + torch.relu(self.refine(fused, edges)))   # Stage 4, Eq. 12
        out = self.head(self.head_dropout(refined))

        hidden_slots = ~vis
        aux = AuxTerms(rec=rec, align=align, route=route,
                       unc_sum=float(u.detach()[hidden_slots].sum()), unc_count=float(hidden_slots.sum()),
                       err_sum=float(norm_err[delta].sum()), err_count=float(delta.sum()))
        return out, aux
