"""Modality matching: tell a node's own (modality A, modality B) pair from a mismatched one.

A pair is scored by the cosine of the A-only and B-only views of the shared model (each
view centered over the client's nodes, see ``paired.py``) divided by a temperature.
Training: BCE over every (A of node i, B of node j) pair of the client's training nodes,
own pairs (i = j) labelled 1 and mismatched pairs 0, the two groups weighted equally (the
sigmoid pair loss of SigLIP; every mismatch is used instead of one sampled per node), on
the task's training view (no validation or test node's pair is seen, see ``paired.py``).
Evaluation per split: own pairs against one fixed mismatched pair per node (a seeded
derangement within the split, so a negative never pairs a node with itself); AUC and AP,
``n`` = number of own pairs; ``spread`` the standard deviation of the scored pairs' cosines
(0: collapsed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.metrics import average_precision, roc_auc, score_spread
from benchmark.registry import TASKS
from benchmark.tasks.base import SPLITS, SPREAD
from benchmark.tasks.link_pred import task_rng
from benchmark.tasks.paired import GALLERY_VIEWS, PairedModalityTask


def derangement(perm: Tensor) -> Tensor:
    """Partner of every position: the next element of a random order (never itself when n >= 2)."""
    partner = torch.empty_like(perm)
    partner[perm] = perm.roll(-1)
    return partner


@TASKS.register("matching")
class Matching(PairedModalityTask):
    """Own vs mismatched modality pairs (BCE; AUC and AP)."""

    primary_metric = "auc"
    metrics = ("auc", "ap")

    @dataclass
    class Config:
        query: str | None = field(
            default=None, metadata={"help": "first modality (default: image or visual, else the first)"})
        gallery: str | None = field(
            default=None, metadata={"help": "second modality (default: text or acoustic, else another)"})
        temperature: float = field(default=0.1, metadata={"help": "pair logit = cosine / temperature", "positive": True})
        embed_dim: int = field(default=64, metadata={"help": "size of the embeddings that are compared", "min": 1, "max": 65_536})
        gallery_view: str = field(default="content", metadata={"help": "content (default): the gallery view is each node's own gallery row with no message passing, so a score above chance is cross-modal content; graph: both views pass messages over the same graph, so graph position alone can score (the structure_control_graph suite shows it)", "choices": GALLERY_VIEWS})
        seed: int = field(default=0, metadata={"help": "seed of the fixed evaluation mismatches", "min": 0, "max": 2**32 - 1})

    def _pair_logits(self, zq: Tensor, zg: Tensor, idx: Tensor, partner: Tensor) -> tuple[Tensor, Tensor]:
        """Logits of the own pairs and of the mismatched pairs (query of idx[i] with gallery of idx[partner[i]])."""
        own = (zq[idx] * zg[idx]).sum(-1) / self.cfg.temperature
        other = (zq[idx] * zg[idx[partner]]).sum(-1) / self.cfg.temperature
        return own, other

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        client = self.training_view(client)  # no validation/test pair reaches training
        zq, zg, both = self.views(model, client)
        idx = torch.nonzero(client.train_mask & both).flatten()
        if idx.numel() < 2:
            return self.zero_loss(zq)
        logits = zq[idx] @ zg[idx].T / self.cfg.temperature
        own = torch.eye(idx.numel(), dtype=torch.bool, device=logits.device)
        return (F.binary_cross_entropy_with_logits(logits[own], torch.ones(idx.numel(), device=logits.device))
                + F.binary_cross_entropy_with_logits(logits[~own], torch.zeros_like(logits[~own])))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        was_training = model.training
        model.eval()
        zq, zg, both = self.views(model, client)
        model.train(was_training)
        out: dict[str, dict[str, float]] = {}
        for s in SPLITS:
            idx = torch.nonzero(getattr(client, f"{s}_mask") & both).flatten()
            if idx.numel() < 2:
                out[s] = {"auc": float("nan"), "ap": float("nan"), SPREAD: float("nan"), "n": 0.0}
                continue
            order = torch.from_numpy(task_rng(self.cfg.seed, client.cid, f"match/{s}").permutation(idx.numel()))
            own, other = self._pair_logits(zq, zg, idx, derangement(order.to(idx.device)))
            scores = torch.cat([own, other]).cpu()
            labels = torch.cat([torch.ones(own.numel(), dtype=torch.long),
                                torch.zeros(other.numel(), dtype=torch.long)])
            out[s] = {"auc": roc_auc(scores, labels), "ap": average_precision(scores, labels),
                      SPREAD: score_spread(scores * self.cfg.temperature), "n": float(idx.numel())}
        return out
