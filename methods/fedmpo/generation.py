"""FedMPO Stage 2 (Sec. 3.2, App. B.2): topology-aware cross-modal generation (AGMG).

For every node i and target modality m, a query built from the target-exclusive context
h_{i,\\m}, the visibility pattern and the target's identity (Eq. 4) attends over a context
bank: the node's own visible non-target modalities plus the visible modalities of up to B
sampled neighbours (Eq. 20). The node's own modality-m token is masked out (the diagonal
mask D), so a hidden target can never be copied. The attended evidence, a gated self
context and the structural anchor give the generated representation (Eq. 5).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EPS = 1e-8


def masked_attention(q: Tensor, k: Tensor, v: Tensor, ok: Tensor, heads: int) -> Tensor:
    """Multi-head attention of q [n, T, h] over k, v [n, S, h] where ok [n, T, S] allows.

    A query with no allowed key gets a zero output (no evidence), not the NaN of a softmax
    over an empty set.
    """
    n, t, hidden = q.shape
    s = k.shape[1]
    dh = hidden // heads
    # broadcast products instead of bmm: T and S are tiny, and batched bmm over n * H
    # matrices of that size is several times slower on CPU
    qh = q.reshape(n, t, 1, heads, dh)
    kh = k.reshape(n, 1, s, heads, dh)
    vh = v.reshape(n, 1, s, heads, dh)
    logits = (qh * kh).sum(-1) / math.sqrt(dh)                              # [n, T, S, H]
    allowed = ok.unsqueeze(-1)
    any_key = allowed.any(2, keepdim=True)
    logits = logits.masked_fill(~allowed, float("-inf"))
    logits = torch.where(any_key, logits, torch.zeros_like(logits))
    p = torch.softmax(logits, dim=2) * any_key.to(logits.dtype)
    return (p.unsqueeze(-1) * vh).sum(2).reshape(n, t, hidden)


class TopologyAwareGenerator(nn.Module):
    """Eq. 4-5: z_hat = gamma (g * c + (1 - g) * W_s h_excl) + (1 - gamma) W_a z_anc."""

    def __init__(self, hidden: int, num_modalities: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            heads = math.gcd(hidden, heads)  # keep the head count a divisor of the width
        self.heads = heads
        self.num_modalities = num_modalities
        self.mask_embed = nn.Linear(num_modalities, hidden)       # E_mask(r_tilde)
        self.mod_embed = nn.Embedding(num_modalities, hidden)     # E_mod(m)
        self.w_q = nn.Linear(3 * hidden, hidden)
        self.w_k = nn.Linear(hidden, hidden)
        self.w_v = nn.Linear(hidden, hidden)
        self.w_o = nn.Linear(hidden, hidden)
        self.gate = nn.Linear(2 * hidden, hidden)                  # g from (evidence, self context)
        self.w_s = nn.Linear(hidden, hidden)
        self.w_a = nn.Linear(hidden, hidden)

    @staticmethod
    def bank(x: Tensor, vis: Tensor, neighbors: Tensor) -> tuple[Tensor, Tensor]:
        """Bank tokens [n, M + B*M, d] gathered from per-node vectors x [n, M, d], and the
        [n, M, S] permission of each target's query (the diagonal self token masked)."""
        n, m_count, dim = x.shape
        nb = neighbors.clamp_min(0)
        tokens = torch.cat([x, x[nb].reshape(n, -1, dim)], dim=1)
        nb_ok = ((neighbors >= 0).unsqueeze(-1) & vis[nb]).reshape(n, -1)     # visible neighbour modalities
        ok = torch.cat([vis, nb_ok], dim=1).unsqueeze(1).expand(n, m_count, tokens.shape[1]).clone()
        idx = torch.arange(m_count, device=x.device)
        ok[:, idx, idx] = False                                               # D: no self-leakage
        return tokens, ok

    def forward(self, h: Tensor, h_excl: Tensor, anchor: Tensor, vis: Tensor, neighbors: Tensor,
                gamma: float) -> Tensor:
        n, m_count, hidden = h.shape
        pattern = self.mask_embed(vis.to(h.dtype)).unsqueeze(1).expand(n, m_count, hidden)
        ident = self.mod_embed.weight.unsqueeze(0).expand(n, m_count, hidden)
        q = self.w_q(torch.cat([h_excl, pattern, ident], dim=-1))
        # project each node's vectors once, then gather them into the banks (same result as
        # projecting the gathered tokens: the projections are linear)
        keys, ok = self.bank(self.w_k(h), vis, neighbors)
        values, _ = self.bank(self.w_v(h), vis, neighbors)
        c = self.w_o(masked_attention(q, keys, values, ok, self.heads))
        g = torch.sigmoid(self.gate(torch.cat([c, h_excl], dim=-1)))
        return gamma * (g * c + (1.0 - g) * self.w_s(h_excl)) + (1.0 - gamma) * self.w_a(anchor)


def reconstruction_loss(z_hat: Tensor, z_raw: Tensor, delta: Tensor) -> Tensor:
    """Eq. 6: squared error against the stopped raw embedding, on artificially masked slots only."""
    err = (z_hat - z_raw.detach()).pow(2).sum(-1)                             # [n, M]
    d = delta.to(err.dtype)
    return (err * d).sum() / (d.sum() + EPS)


def normalized_error(z_hat: Tensor, z_raw: Tensor) -> Tensor:
    """NormErr in [0, 1]: ||z_hat - z||^2 / (2 (||z_hat||^2 + ||z||^2)), detached.

    The paper calibrates uncertainty against a "normalized reconstruction error" without
    saying how it is normalized. This ratio is scale-free and bounded by 1 (since
    ||a - b||^2 <= 2 ||a||^2 + 2 ||b||^2), so it can be matched by a sigmoid and its
    client mean is a comparable reliability statistic across clients.
    """
    a, b = z_hat.detach(), z_raw.detach()
    return (a - b).pow(2).sum(-1) / (2.0 * (a.pow(2).sum(-1) + b.pow(2).sum(-1)) + EPS)


def alignment_loss(z_tilde: Tensor, vis: Tensor, proj: nn.Module) -> Tensor:
    """Eq. 7: mean of 1 - cos(W_al z_m, W_al z_m') over the node's modality pairs.

    Omega = pairs of one node in which at least one side is visible, so that recovered
    modalities are pulled towards observed ones (two recovered vectors are not aligned
    with each other only).
    """
    m_count = z_tilde.shape[1]
    if m_count < 2:
        return z_tilde.sum() * 0.0
    p = proj(z_tilde)
    i, j = torch.triu_indices(m_count, m_count, offset=1, device=z_tilde.device)
    cos = F.cosine_similarity(p[:, i], p[:, j], dim=-1)                       # [n, P]
    valid = (vis[:, i] | vis[:, j]).to(cos.dtype)
    return ((1.0 - cos) * valid).sum() / valid.sum().clamp_min(1.0)
