"""Node classification: cross-entropy on training nodes; accuracy and macro-F1.

Macro-F1 comes two ways. ``macro_f1`` is each client's macro-F1 averaged over clients
weighted by their split sizes (what the records made before ``macro_f1_pooled`` hold, and
what per-client tables show); ``macro_f1_pooled`` is the macro-F1 of every client's
predictions taken together (from per-class counts each client reports), the number a reader
of a single test set expects. ``spread`` is the share of a split's nodes whose prediction
differs from the split's most common prediction: 0 when the model predicts one class for
every node (collapsed).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.metrics import accuracy, class_counts, macro_f1, pooled_macro_f1, prediction_spread
from benchmark.registry import TASKS
from benchmark.tasks.base import SPLITS, SPREAD, Task


@TASKS.register("node_cls")
class NodeClassification(Task):
    """Node classification (cross-entropy; accuracy and macro-F1)."""

    primary_metric = "accuracy"
    metrics = ("accuracy", "macro_f1", "macro_f1_pooled")
    classifies_nodes = True
    # 2: features standardized on each client's training rows (dataset.normalize); pooled macro-F1
    protocol_version = 2

    def out_dim(self, num_classes: int) -> int:
        return num_classes

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        logits = model(client)
        return F.cross_entropy(logits[client.train_mask], client.y[client.train_mask])

    def loss_from_logits(self, logits: Tensor, client: ClientData) -> Tensor:
        return F.cross_entropy(logits[client.train_mask], client.y[client.train_mask])

    @torch.no_grad()
    def scores_from_logits(self, logits: Tensor, client: ClientData) -> dict[str, dict[str, float]]:
        pred = logits.argmax(dim=-1)
        out: dict[str, dict[str, float]] = {}
        for split in SPLITS:
            mask = getattr(client, f"{split}_mask")
            p, y = pred[mask].cpu(), client.y[mask].cpu()
            out[split] = {
                "accuracy": accuracy(p, y),
                "macro_f1": macro_f1(p, y, client.num_classes),
                SPREAD: prediction_spread(p),
                "n": float(mask.sum()),
                **class_counts(p, y, client.num_classes),
            }
        return out

    def aggregate(self, per_client: dict[int, dict[str, dict[str, float]]], split: str) -> dict[str, float]:
        """The size-weighted means, plus ``macro_f1_pooled`` over every client's predictions."""
        out = super().aggregate(per_client, split)
        rows = [per_client[c][split] for c in sorted(per_client)]
        if any(k.startswith("_tp/") or k.startswith("_sup/") for r in rows for k in r):
            out["macro_f1_pooled"] = pooled_macro_f1(rows)
        return out

    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        was_training = model.training
        model.eval()
        logits = model(client)
        model.train(was_training)
        return self.scores_from_logits(logits, client)
