"""FedMGS prototype banks: client estimates (Eq. 3, client side), server refresh (Eq. 3) and spread (Eq. 6).

A bank holds, for every modality m and anchor c (a class, or a cluster for unlabeled
tasks), the federated prototype p_bar_c^m, its observation count and the per-modality
inter-anchor spread Delta_m. Only these statistics travel: no node-level row ever does.

Unlabeled tasks (link prediction, retrieval, matching) have no classes, so anchors are
clusters found without labels, by federated spherical k-means in the space of the fused
initial representation s_i (Eq. 2):

* first round with an empty bank: each client clusters its own s_i into ``A`` local
  clusters (k-means++ then Lloyd, seeded) and uploads per-cluster, per-modality means
  (the same Eq. 3 payload); the server clusters the uploaded cluster centroids (weighted
  by their counts) into ``A`` global anchors and pools each modality's estimates per
  anchor with the Eq. 3 count weighting (:func:`init_bank_from_local_clusters`);
* later rounds: each client assigns every node to its most similar valid anchor
  (cosine between s_i and p_bar_c = mean_m p_bar_c^m, the similarity of L_proto) and
  uploads Eq. 3 per anchor; the server applies Eq. 3 by index (one Lloyd step per round).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmark.comm import Payload

BANK_PREFIX = "bank."


@dataclass
class Bank:
    """Server prototype bank: protos [M, A, d], counts [M, A] (0 = no valid estimate), spread [M]."""

    protos: Tensor
    counts: Tensor
    spread: Tensor

    @classmethod
    def empty(cls, num_modalities: int, num_anchors: int, dim: int, device: torch.device | str = "cpu") -> "Bank":
        return cls(torch.zeros(num_modalities, num_anchors, dim, device=device),
                   torch.zeros(num_modalities, num_anchors, device=device),
                   torch.zeros(num_modalities, device=device))

    @property
    def valid(self) -> Tensor:
        """[M, A] entries estimated from at least one observation."""
        return self.counts > 0

    @property
    def is_empty(self) -> bool:
        return not bool(self.valid.any())

    def fused(self) -> tuple[Tensor, Tensor]:
        """p_bar_c = mean over modalities of p_bar_c^m (valid modalities only), and the anchors that have one."""
        v = self.valid.to(self.protos.dtype).unsqueeze(-1)                    # [M, A, 1]
        total = v.sum(0)                                                      # [A, 1]
        fused = (self.protos * v).sum(0) / total.clamp_min(1.0)
        return fused, total.squeeze(-1) > 0

    def to_payload(self, modalities: list[str]) -> Payload:
        out: Payload = {}
        for j, m in enumerate(modalities):
            out[f"{BANK_PREFIX}proto.{m}"] = self.protos[j].clone()
            out[f"{BANK_PREFIX}count.{m}"] = self.counts[j].clone()
            out[f"{BANK_PREFIX}spread.{m}"] = self.spread[j:j + 1].clone()
        return out

    @classmethod
    def from_payload(cls, payload: Payload, modalities: list[str]) -> "Bank":
        return cls(torch.stack([payload[f"{BANK_PREFIX}proto.{m}"] for m in modalities]),
                   torch.stack([payload[f"{BANK_PREFIX}count.{m}"] for m in modalities]),
                   torch.cat([payload[f"{BANK_PREFIX}spread.{m}"] for m in modalities]))


# --------------------------------------------------------------------------- client side


def client_estimates(enc: Tensor, available: Tensor, anchor: Tensor, nodes: Tensor,
                     num_anchors: int) -> tuple[Tensor, Tensor]:
    """Eq. 3 on one client: p_{k,c}^m = mean of e_m(x_i^m) over O_{k,c}^m, and n_{k,c}^m = |O_{k,c}^m|.

    ``enc`` [n, M, d] ungated encodings e_m(x_i^m); ``available`` [n, M]; ``anchor`` [n] the
    class or anchor of each node (ignored outside ``nodes``); ``nodes`` [n] bool, the nodes
    allowed to contribute (training nodes: no validation or test label is read).
    Returns protos [M, A, d] (zero where the count is 0) and counts [M, A].
    """
    n, m_count, d = enc.shape
    protos = torch.zeros(m_count, num_anchors, d, device=enc.device, dtype=enc.dtype)
    counts = torch.zeros(m_count, num_anchors, device=enc.device, dtype=enc.dtype)
    for j in range(m_count):
        obs = nodes & available[:, j]
        idx = anchor[obs]
        counts[j] = torch.bincount(idx, minlength=num_anchors)[:num_anchors].to(enc.dtype)
        protos[j].index_add_(0, idx, enc[obs, j])
    protos = protos / counts.clamp_min(1.0).unsqueeze(-1)
    return protos, counts


def assign_to_bank(s: Tensor, bank: Bank) -> Tensor:
    """Hard assignment of each row of ``s`` to its most cosine-similar valid anchor."""
    fused, ok = bank.fused()
    sim = F.normalize(s, dim=-1) @ F.normalize(fused, dim=-1).T
    return sim.masked_fill(~ok.unsqueeze(0), float("-inf")).argmax(1)


def spherical_kmeans(x: Tensor, k: int, generator: torch.Generator, weights: Tensor | None = None,
                     iters: int = 10) -> tuple[Tensor, Tensor]:
    """Weighted spherical k-means (k-means++ seeding, Lloyd steps on unit vectors).

    Returns (centers [k', d], labels [n]) with k' = min(k, n). Deterministic given the generator.
    """
    xn = F.normalize(x, dim=-1)
    n = xn.shape[0]
    k = min(k, n)
    w = torch.ones(n, dtype=x.dtype, device=x.device) if weights is None else weights.to(x.dtype)
    first = int(torch.multinomial(w.cpu() / w.sum().cpu(), 1, generator=generator))
    centers = [xn[first]]
    for _ in range(1, k):
        dist = (1.0 - xn @ torch.stack(centers).T).clamp_min(0.0).min(1).values * w
        prob = dist.cpu() if float(dist.sum()) > 0 else w.cpu()
        centers.append(xn[int(torch.multinomial(prob / prob.sum(), 1, generator=generator))])
    c = torch.stack(centers)
    labels = (xn @ c.T).argmax(1)
    for _ in range(iters):
        new = torch.zeros_like(c).index_add_(0, labels, xn * w.unsqueeze(1))
        empty = new.norm(dim=1) == 0
        c = torch.where(empty.unsqueeze(1), c, F.normalize(new, dim=-1))
        labels = (xn @ c.T).argmax(1)
    return c, labels


# --------------------------------------------------------------------------- server side


def aggregate_estimates(protos: Tensor, counts: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Eq. 3, server side: p_bar_c^m = sum_k n_{k,c}^m p_{k,c}^m / (sum_k n_{k,c}^m + eps), valid entries only.

    ``protos`` [K, M, A, d], ``counts`` [K, M, A]. Entries with n = 0 carry no weight, so a
    client's missing modality never attenuates a prototype (Prop. 5.2). Returns the new
    protos [M, A, d] and total counts [M, A].
    """
    total = counts.sum(0)
    summed = (protos * counts.unsqueeze(-1)).sum(0)
    return summed / (total.unsqueeze(-1) + eps), total


def spread(protos: Tensor, valid: Tensor) -> Tensor:
    """Eq. 6: Delta_m = (1/d) sum_r Var({(p_bar_c^m)_r : c valid}) per modality.

    Population variance; 0 while fewer than two anchors are valid.
    """
    out = torch.zeros(protos.shape[0], dtype=protos.dtype, device=protos.device)
    for j in range(protos.shape[0]):
        p = protos[j][valid[j]]
        if p.shape[0] >= 2:
            out[j] = p.var(dim=0, unbiased=False).mean()
    return out


def refresh_bank(old: Bank, protos: Tensor, counts: Tensor, eps: float) -> Bank:
    """Alg. 1 line 19: Eq. 3 over this round's uploads, then Eq. 6.

    An (anchor, modality) entry that no sampled client observed this round keeps its
    previous value and count (the server keeps its bank across rounds; with every client
    sampled and fixed availability this never happens after the first round).
    """
    new, total = aggregate_estimates(protos, counts, eps)
    seen = total > 0
    bank_protos = torch.where(seen.unsqueeze(-1), new, old.protos)
    bank_counts = torch.where(seen, total, old.counts)
    return Bank(bank_protos, bank_counts, spread(bank_protos, bank_counts > 0))


def init_bank_from_local_clusters(protos: Tensor, counts: Tensor, num_anchors: int, eps: float,
                                  generator: torch.Generator, iters: int = 10) -> Bank:
    """First round of an unlabeled task: align the clients' local clusters into global anchors.

    Each uploaded local cluster (k, c) is a point: its fused centroid (mean over the
    modalities it observed), weighted by its number of observations. Weighted spherical
    k-means turns them into ``num_anchors`` anchors; every modality's anchor prototype is
    then Eq. 3 over the local clusters mapped to it.
    """
    k_clients, m_count, a_local, d = protos.shape
    flat_p = protos.permute(0, 2, 1, 3).reshape(-1, m_count, d)          # [K*A, M, d]
    flat_n = counts.permute(0, 2, 1).reshape(-1, m_count)                # [K*A, M]
    obs = (flat_n > 0).to(protos.dtype)
    keep = obs.sum(1) > 0
    bank = Bank.empty(m_count, num_anchors, d, protos.device)
    if not bool(keep.any()):
        return bank
    flat_p, flat_n, obs = flat_p[keep], flat_n[keep], obs[keep]
    centroid = (flat_p * obs.unsqueeze(-1)).sum(1) / obs.sum(1, keepdim=True)
    _, labels = spherical_kmeans(centroid, num_anchors, generator, weights=flat_n.sum(1), iters=iters)
    onehot = F.one_hot(labels, num_anchors).to(protos.dtype)                  # [P, A]
    total = torch.einsum("pa,pm->ma", onehot, flat_n)                         # [M, A]
    summed = torch.einsum("pa,pm,pmd->mad", onehot, flat_n, flat_p)           # [M, A, d]
    new = summed / (total.unsqueeze(-1) + eps)
    return Bank(new, total, spread(new, total > 0))
