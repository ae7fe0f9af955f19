"""Pieces shared by the multimodal FL baselines: a hookable model, contrastive losses,
a generic local optimization loop, CKA and k-means.

Why a shared module: all four methods change only *what happens to the per-modality
vectors before fusion* and *which extra loss is added*, and all four must keep the
task's rules (a link-prediction model never passes messages over held-out edges).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.training import LocalLoop, LoopLog
from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.models.multimodal import MultimodalGNN
from benchmark.tasks.base import Task
from benchmark.tasks.paired import PairedModalityTask


# --------------------------------------------------------------------------- model


class ModalityGNN(MultimodalGNN):
    """MultimodalGNN split into hooks: raw encodings -> per-modality vectors -> fusion -> propagation.

    Subclasses override ``modality_vectors`` (what enters the fusion) and may return extra
    tensors from ``embed_parts`` for their auxiliary losses; ``embed``/``forward`` keep the
    parent's signature so every task works unchanged.
    """

    def modality_vectors(self, raw: Tensor, client: ClientData) -> tuple[Tensor, Tensor | None]:
        """([n, M, hidden] vectors for the fusion, availability it should respect or None)."""
        return raw, (client.available if self.mask_missing else None)

    def fuse(self, h: Tensor, available: Tensor | None) -> Tensor:
        return self.fusion(h, available)

    def propagate(self, fused: Tensor, client: ClientData) -> Tensor:
        return torch.relu(self.backbone(self.input_dropout(fused), client.edge_index))

    def embed_parts(self, client: ClientData, features: dict[str, Tensor] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """(node embeddings, {"raw": per-modality encoder outputs [n, M, h], ...})."""
        raw = self.encode_modalities(features if features is not None else client.features)
        h, available = self.modality_vectors(raw, client)
        return self.propagate(self.fuse(h, available), client), {"raw": raw}

    def embed(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        return self.embed_parts(client, features)[0]


class PartsTap(nn.Module):
    """Runs a ModalityGNN like ``model(client)`` and keeps what each forward computed.

    Lets an auxiliary loss reuse the forward pass the task loss already made (the task
    decides the view, e.g. link prediction's training message graph) instead of paying
    for a second one.
    """

    def __init__(self, model: ModalityGNN) -> None:
        super().__init__()
        self.model = model
        self.seen: list[tuple[Tensor, dict[str, Tensor]]] = []

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        z, extras = self.model.embed_parts(client, features)
        self.seen.append((z, extras))
        return self.model.head(z)


def task_loss_and_parts(task: Task, model: ModalityGNN, client: ClientData) -> tuple[Tensor, tuple[Tensor, dict[str, Tensor]]]:
    """The task loss and the (embeddings, extras) of the full-modality training view.

    Node classification and link prediction run the model once on that view, which is
    reused; the paired tasks only run one-modality views, so the joint view costs one
    more forward pass.
    """
    tap = PartsTap(model)
    loss = task.loss(tap, client)
    if tap.seen and not task.paired:
        return loss, tap.seen[0]
    return loss, model.embed_parts(task.training_view(client))


class CrossModalAttention(nn.Module):
    """Residual multi-head self-attention across a node's modality tokens [n, M, h].

    FedMPO's Table 8 lists FedMAC and FedMVP with 4-head cross-modal attention and
    dropout 0.1; this is that block, placed before the fusion.
    """

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        if hidden % heads:
            raise ConfigError(f"model.hidden ({hidden}) must be divisible by algorithm.attention_heads ({heads})")
        self.attn = nn.MultiheadAttention(hidden, heads, dropout=dropout, batch_first=True)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: Tensor, available: Tensor | None = None) -> Tensor:
        pad = None
        if available is not None:
            pad = ~available
            pad = pad & available.any(1, keepdim=True)  # a node with nothing present attends to all
        out, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        return self.norm(h + out)


# --------------------------------------------------------------------------- views


def only_view(client: ClientData, keep: int) -> ClientData:
    """The client seen through one modality (the others zeroed and marked unavailable)."""
    return PairedModalityTask.only(client, keep)


def with_features(client: ClientData, features: dict[str, Tensor], available: Tensor) -> ClientData:
    return dataclasses.replace(client, features=features, available=available)


def labels_for_contrast(task: Task, client: ClientData) -> Tensor | None:
    """Training labels when the task is node classification, else None (instance-level contrast)."""
    if task.classifies_nodes and client.y is not None:
        return client.y
    return None


def cap(idx: Tensor, limit: int) -> Tensor:
    """At most ``limit`` of the indices (a random subset from the seeded global RNG)."""
    if limit <= 0 or idx.numel() <= limit:
        return idx
    return idx[torch.randperm(idx.numel(), device=idx.device)[:limit]]


# --------------------------------------------------------------------------- losses


def info_nce(a: Tensor, b: Tensor, tau: float) -> Tensor:
    """Symmetric InfoNCE: row i of ``a`` and row i of ``b`` are positives, other rows negatives."""
    if a.shape[0] < 2:
        return (a.sum() + b.sum()) * 0.0
    logits = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T / tau
    target = torch.arange(a.shape[0], device=a.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def sup_con(anchor: Tensor, cand: Tensor, y_anchor: Tensor, y_cand: Tensor, tau: float) -> Tensor:
    """Supervised contrastive loss (Khosla et al.) from anchors to a candidate set.

    For anchor i, every candidate with the same label is a positive; the loss is the mean
    over positives of -log softmax over all candidates. Anchors without a positive are skipped.
    """
    logits = F.normalize(anchor, dim=-1) @ F.normalize(cand, dim=-1).T / tau
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    pos = (y_anchor.unsqueeze(1) == y_cand.unsqueeze(0)).to(log_prob.dtype)
    has = pos.sum(1) > 0
    if not has.any():
        return logits.sum() * 0.0
    return (-(log_prob * pos).sum(1)[has] / pos.sum(1)[has]).mean()


# --------------------------------------------------------------------------- optimization


def optimize(opt: torch.optim.Optimizer, params: Iterable[Tensor], loss_fn: Callable[[], Tensor],
             epochs: int, grad_clip: float, cid: int) -> LoopLog:
    """Full-batch steps of ``loss_fn`` through the core loop (``benchmark.training``)."""
    return LocalLoop(epochs=epochs, grad_clip=grad_clip).run(loss_fn, opt, params, cid=cid)


# --------------------------------------------------------------------------- server statistics


def linear_cka(x: Tensor, y: Tensor) -> Tensor:
    """Linear CKA (Kornblith et al., 2019) of two representations of the same n inputs."""
    x = x.double() - x.double().mean(0, keepdim=True)
    y = y.double() - y.double().mean(0, keepdim=True)
    num = (y.T @ x).pow(2).sum()
    den = torch.sqrt((x.T @ x).pow(2).sum() * (y.T @ y).pow(2).sum())
    return (num / den).float() if den > 0 else torch.zeros((), dtype=torch.float32)


def kmeans(points: Tensor, k: int, generator: torch.Generator, iters: int = 25) -> Tensor:
    """k-means++ seeding then Lloyd iterations; [k, d] centroids, deterministic given the generator.

    An empty cluster is re-seeded at the point farthest from its centroid.
    """
    x = points.detach().double().cpu()
    n = x.shape[0]
    if n <= k:
        pad = x[torch.arange(k) % n]
        return pad.float()
    first = int(torch.randint(n, (1,), generator=generator))
    cents = [x[first]]
    d2 = (x - x[first]).pow(2).sum(1)
    for _ in range(1, k):
        probs = d2 / d2.sum() if d2.sum() > 0 else torch.full((n,), 1.0 / n, dtype=x.dtype)
        nxt = int(torch.multinomial(probs, 1, generator=generator))
        cents.append(x[nxt])
        d2 = torch.minimum(d2, (x - x[nxt]).pow(2).sum(1))
    c = torch.stack(cents)
    for _ in range(iters):
        dist = torch.cdist(x, c)
        assign = dist.argmin(1)
        new = c.clone()
        for j in range(k):
            members = assign == j
            if members.any():
                new[j] = x[members].mean(0)
            else:
                new[j] = x[dist.min(1).values.argmax()]
        if torch.allclose(new, c):
            c = new
            break
        c = new
    return c.float()


def modality_counts(client: ClientData) -> Tensor:
    """[M] number of the client's nodes holding each modality (metadata, no rows)."""
    return client.available.sum(0).to(torch.float32)
