"""FedMPO Stage 3 (Sec. 3.3, App. B.3): missing-aware mixture-of-experts fusion.

Recovery uncertainty u (0 for a visible modality, Eq. 8) drives three things: the router
between an observed and a recovered expert (Eq. 9-10), the reliability weights of the
modality fusion (Eq. 11 / 34), and the structural fallback gate (Eq. 35-36). The router
loss (Eq. 33) calibrates u on artificially masked modalities and balances expert usage.
``SimpleFusion`` is what replaces all of this in the w/o MoE ablation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EPS = 1e-8
FALLBACK_INIT = 2.0   # initial bias of the fallback gate: structure first (App. C.6.2)


@dataclass
class MoEOutput:
    """The fused node vectors, the uncertainty per (node, modality), and the routing loss."""

    fused: Tensor          # [n, h]
    uncertainty: Tensor    # [n, M]
    route_loss: Tensor     # scalar: L_unc + lambda_bal * L_bal


def _expert(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())


class MissingAwareMoE(nn.Module):
    """Uncertainty head f_u, router f_r, experts E_obs / E_rec / E_struct, fallback gate f_fb."""

    def __init__(self, hidden: int, conditional: bool, temperature: float, floor: float, clamp: float,
                 lambda_bal: float) -> None:
        super().__init__()
        rh = max(4, hidden // 2)                               # Table 7: max(4, d_model / 2)
        self.uncertainty = nn.Sequential(nn.Linear(3 * hidden, rh), nn.ReLU(), nn.Linear(rh, 1))
        self.conditional = conditional
        if conditional:
            self.router = nn.Sequential(nn.Linear(4, rh), nn.ReLU(), nn.Linear(rh, 2))
        else:
            self.router_logits = nn.Parameter(torch.zeros(2))
        self.e_obs, self.e_rec, self.e_struct = _expert(hidden), _expert(hidden), _expert(hidden)
        # f_fb with non-negative slopes (softplus), so alpha_fb grows with missing ratio and
        # uncertainty. It starts at sigmoid(2) = 0.88: App. C.6.2 reports that early rounds lean
        # on the structural fallback and shift to the modality experts as the generator learns.
        self.fb_slope = nn.Parameter(torch.zeros(2))
        self.fb_bias = nn.Parameter(torch.tensor(FALLBACK_INIT))
        self.norm = nn.LayerNorm(hidden)
        self.temperature, self.floor, self.clamp, self.lambda_bal = temperature, floor, clamp, lambda_bal

    def route(self, vis: Tensor, u: Tensor, rho_node: Tensor, rho_client: Tensor) -> Tensor:
        """Eq. 9: [n, M, 2] probabilities of (observed, recovered) experts."""
        n, m_count = vis.shape
        if self.conditional:
            feats = torch.stack([vis.to(u.dtype), u, rho_node.unsqueeze(1).expand(n, m_count),
                                 rho_client.expand(n, m_count)], dim=-1)
            logits = self.router(feats)
        else:
            logits = self.router_logits.expand(n, m_count, 2)
        w = torch.softmax(logits / self.temperature, dim=-1)
        return self.floor / 2.0 + (1.0 - self.floor) * w

    def forward(self, z_raw: Tensor, z_hat: Tensor, h_excl: Tensor, anchor: Tensor, h_str: Tensor,
                vis: Tensor, delta: Tensor, norm_err: Tensor, rho_client: Tensor) -> MoEOutput:
        u_gen = torch.sigmoid(self.uncertainty(torch.cat([z_hat, h_excl, anchor], dim=-1))).squeeze(-1)
        u = torch.where(vis, torch.zeros_like(u_gen), u_gen)                             # Eq. 8
        rho_node = 1.0 - vis.to(u.dtype).mean(1)
        w = self.route(vis, u, rho_node, rho_client)
        rec = self.e_rec(z_hat)
        f = torch.where(vis.unsqueeze(-1), w[..., :1] * self.e_obs(z_raw) + w[..., 1:] * rec, rec)   # Eq. 10
        # Eq. 11 / 34: exp(-u) reliability weights; Table 7 caps the penalty at uncertainty_clamp
        e = torch.exp(-u.clamp(max=self.clamp))
        a = e / (e.sum(1, keepdim=True) + EPS)
        alpha = torch.sigmoid(F.softplus(self.fb_slope[0]) * rho_node + F.softplus(self.fb_slope[1]) * u.mean(1)
                              + self.fb_bias).unsqueeze(-1)                              # Eq. 35
        fused = self.norm((1.0 - alpha) * (a.unsqueeze(-1) * f).sum(1) + alpha * self.e_struct(h_str))  # Eq. 36
        d = delta.to(u.dtype)
        l_unc = (d * (u_gen - norm_err).pow(2)).sum() / (d.sum() + EPS)                  # Eq. 28
        l_bal = (w.mean(dim=(0, 1)) - 0.5).pow(2).sum()                                  # Eq. 32
        return MoEOutput(fused=fused, uncertainty=u, route_loss=l_unc + self.lambda_bal * l_bal)


class SimpleFusion(nn.Module):
    """w/o MoE: the mean of the modality vectors (observed, else recovered), projected and normalized."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, z_tilde: Tensor) -> Tensor:
        return self.norm(self.proj(z_tilde.mean(1)))
