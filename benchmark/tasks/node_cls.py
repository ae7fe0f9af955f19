"""Node classification: cross-entropy on training nodes; accuracy and macro-F1."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.metrics import accuracy, macro_f1
from benchmark.registry import TASKS
from benchmark.tasks.base import SPLITS, Task


@TASKS.register("node_cls")
class NodeClassification(Task):
    """Node classification (cross-entropy; accuracy and macro-F1)."""

    primary_metric = "accuracy"
    metrics = ("accuracy", "macro_f1")

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
                "n": float(mask.sum()),
            }
        return out

    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        was_training = model.training
        model.eval()
        logits = model(client)
        model.train(was_training)
        return self.scores_from_logits(logits, client)
