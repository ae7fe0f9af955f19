"""FedMPO Stage 4, server side (Eq. 14 / 40-42): reliability-aware aggregation weights."""

from __future__ import annotations

import torch
from torch import Tensor

EPS = 1e-12


def reliability_scores(uncertainty: Tensor, rec_error: Tensor, missing_ratio: Tensor,
                       eta_u: float = 1.0, eta_e: float = 1.0, eta_rho: float = 1.0) -> Tensor:
    """s_k = exp(-eta_u u_k - eta_e e_k - eta_rho rho_k): always positive, so no client is dropped."""
    return torch.exp(-eta_u * uncertainty - eta_e * rec_error - eta_rho * missing_ratio)


def reliability_weights(sizes: Tensor, uncertainty: Tensor, rec_error: Tensor, missing_ratio: Tensor,
                        eta_u: float = 1.0, eta_e: float = 1.0, eta_rho: float = 1.0) -> Tensor:
    """omega_k = |V_k| s_k / (sum_j |V_j| s_j + eps), in float64.

    Equal statistics give the size-weighted FedAvg weights back (the paper's sanity remark).
    """
    s = reliability_scores(uncertainty.double(), rec_error.double(), missing_ratio.double(), eta_u, eta_e, eta_rho)
    mass = sizes.double() * s
    return mass / (mass.sum() + EPS)


def size_weights(sizes: Tensor) -> Tensor:
    """Data-size-weighted FedAvg weights (the w/o RelAgg ablation)."""
    sizes = sizes.double()
    return sizes / (sizes.sum() + EPS)
