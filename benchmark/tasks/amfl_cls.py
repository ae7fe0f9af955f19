"""AMFL classification (docs/protocols.md Track 4): each client's personal model on its own
label space; ACC = mean over clients of personal test accuracy (FedMBridge §5.1).

The engine weights clients by the ``n`` each reports; ACC is a plain mean over clients,
so every client reports ``n = 1`` for val and test (the split sizes are in ``size``).
``spread`` is the share of a split's rows whose prediction differs from the client's most
common one (0: the personal model predicts one class for all; ``benchmark/guard.py``).
Local training is mini-batch (Table 5: batch 128) through the core loop; batches are
drawn from the training rows only, so no validation or test row ever enters a loss. A
client that holds a subgraph (the ``amfl_graph`` sources) passes its edges to the model:
a GNN encoder runs over the whole client graph (transductive, as the graph track's node
classification: validation and test nodes' features, never their labels, reach their
neighbours) and the loss is taken at the batch's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.amfl.client import AMFLClientData
from benchmark.amfl.model import logits_at
from benchmark.metrics import accuracy, prediction_spread
from benchmark.registry import TASKS
from benchmark.tasks.base import SPLITS, SPREAD, Task
from benchmark.training import shuffled_batches


@TASKS.register("amfl_cls")
class AMFLClassification(Task):
    """AMFL personalized classification: cross-entropy on mini-batches; ACC = mean over clients of personal accuracy."""

    primary_metric = "accuracy"
    tuned_options = ("train.lr", "train.weight_decay", "train.local_epochs")  # each client's architecture is fixed
    metrics = ("accuracy",)

    @dataclass
    class Config:
        batch_size: int = field(default=128, metadata={"help": "training batch size (Table 5: 128)", "min": 1, "max": 1_000_000})

    def __init__(self, cfg: "AMFLClassification.Config | None" = None) -> None:
        super().__init__(cfg if cfg is not None else self.Config())
        self.cfg: AMFLClassification.Config

    def out_dim(self, num_classes: int) -> int:
        return num_classes

    def batch_loss(self, model: nn.Module, client: AMFLClientData, idx: Tensor) -> Tensor:
        """Cross-entropy on training rows ``idx``."""
        return F.cross_entropy(logits_at(model, client.features, client.edge_index, idx), client.y[idx])

    def loss(self, model: nn.Module, client: AMFLClientData) -> Tensor:
        return self.batch_loss(model, client, client.split_index("train"))

    def batches(self, client: AMFLClientData, generator: torch.Generator) -> Callable[[int], Iterable[Tensor]]:
        """An epoch's mini-batches of training rows, in a fresh seeded order each epoch."""
        return shuffled_batches(client.split_index("train"), self.cfg.batch_size, generator)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: AMFLClientData) -> dict[str, dict[str, float]]:
        was_training = model.training
        model.eval()
        pred = model(client.features, client.edge_index).argmax(-1)
        model.train(was_training)
        out: dict[str, dict[str, float]] = {}
        for split in SPLITS:
            mask = getattr(client, f"{split}_mask")
            p = pred[mask].cpu()
            out[split] = {"accuracy": accuracy(p, client.y[mask].cpu()), SPREAD: prediction_spread(p), "n": 1.0,
                          "size": float(mask.sum())}
        return out
