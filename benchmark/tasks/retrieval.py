"""Cross-modal retrieval: for each query-modality embedding, rank the gallery-modality ones.

Training: symmetric InfoNCE (temperature 0.07, as FedMPO) between the query and gallery
views of the client's training nodes that hold both modalities (see ``paired.py`` for the
views), on the task's training view: no validation or test node's query or gallery row
reaches training, not even through message passing. Evaluation per split: the split's
nodes with both modalities; every node's query ranks the gallery of that split (on its own
client); Recall@1/5/10 and MRR, ties counted against the true item; ``spread`` is the
standard deviation of the split's query-gallery cosines (0: every score tied, collapsed). A random scorer has
MRR ``H_G / G`` for a gallery of ``G`` items.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.metrics import mean_reciprocal_rank, ranks_of_diagonal, recall_at_k, score_spread
from benchmark.registry import TASKS
from benchmark.tasks.base import SPLITS, SPREAD
from benchmark.tasks.paired import GALLERY_VIEWS, PairedModalityTask

RECALL_KS = (1, 5, 10)


@TASKS.register("retrieval")
class Retrieval(PairedModalityTask):
    """Query-modality -> gallery-modality retrieval (InfoNCE; Recall@1/5/10 and MRR)."""

    primary_metric = "mrr"
    metrics = ("mrr", "recall@1", "recall@5", "recall@10")
    ranks_gallery = True

    @dataclass
    class Config:
        query: str | None = field(
            default=None, metadata={"help": "query modality (default: image or visual, else the first)"})
        gallery: str | None = field(
            default=None, metadata={"help": "gallery modality (default: text or acoustic, else another)"})
        temperature: float = field(default=0.07, metadata={"help": "InfoNCE temperature", "positive": True})
        embed_dim: int = field(default=64, metadata={"help": "size of the embeddings that are compared", "min": 1, "max": 65_536})
        gallery_view: str = field(default="content", metadata={"help": "content (default): the gallery view is each node's own gallery row with no message passing, so a score above chance is cross-modal content; graph: both views pass messages over the same graph, so graph position alone can score (the structure_control_graph suite shows it)", "choices": GALLERY_VIEWS})

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        client = self.training_view(client)  # no validation/test pair reaches training
        zq, zg, both = self.views(model, client)
        idx = torch.nonzero(client.train_mask & both).flatten()
        if idx.numel() < 2:
            return self.zero_loss(zq)
        logits = zq[idx] @ zg[idx].T / self.cfg.temperature
        target = torch.arange(idx.numel(), device=logits.device)
        return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        was_training = model.training
        model.eval()
        zq, zg, both = self.views(model, client)
        model.train(was_training)
        out: dict[str, dict[str, float]] = {}
        for s in SPLITS:
            idx = torch.nonzero(getattr(client, f"{s}_mask") & both).flatten()
            if idx.numel() < 2:  # a gallery of one is no retrieval: rank 1 would be free
                out[s] = {"mrr": float("nan"), **{f"recall@{k}": float("nan") for k in RECALL_KS},
                          SPREAD: float("nan"), "n": 0.0}
                continue
            sims = zq[idx] @ zg[idx].T
            ranks = ranks_of_diagonal(sims).cpu()
            row = {"mrr": mean_reciprocal_rank(ranks), SPREAD: score_spread(sims)}
            row.update({f"recall@{k}": recall_at_k(ranks, k) for k in RECALL_KS})
            out[s] = {**row, "n": float(idx.numel())}
        return out
