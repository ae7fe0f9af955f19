"""Chance: the score of a predictor that knows nothing of a node but the training label histogram.

Why. A table needs the floor every learned method must clear, per (dataset, task), stated in
the table's own metrics and weighted over the same split nodes: a method near it learned
nothing, whatever its absolute number looks like.

What exactly it is, per task (no parameter is learned; nothing is exchanged):

* ``node_cls``: the majority class of the pooled view's *training* labels (``train_mask``
  nodes only, ties to the lowest class id) predicted for every node, scored by the task's
  own ``scores_from_logits`` on constant logits favouring that class, so accuracy, macro-F1,
  ``spread`` (0) and the per-class counts are exactly what the task computes.
* ``retrieval``: the expected score of a uniformly random ranking of each split's gallery
  (the split's nodes holding both modalities, ``G`` of them, as ``Retrieval.evaluate``
  counts them): recall@K = min(K, G) / G and MRR = H_G / G (``H_G`` the G-th harmonic
  number). Computed analytically, not by scoring a tie: the task counts ties against the
  true item, so an all-tied scorer gets MRR 1/G, the worst case rather than chance.
  NaN and ``n`` = 0 for G < 2, as the task.
* ``matching`` and ``link_pred``: every pair scored equal (an all-zero embedding run through
  the task's own ``evaluate``), so AUC is 0.5 and AP the share of positives among the
  scored pairs (matching: 0.5; link prediction: positives / (positives + negatives) of the
  split as the task builds it), ``spread`` 0, with the task's own NaN conventions.

Every split row holds every key the task's ``evaluate`` returns, ``n`` included.
``centralized = True`` only so that the majority class comes from the pooled training
labels; the pooled client keeps it in its private state (it uploads nothing).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.algorithm import Algorithm
from benchmark.comm import Payload
from benchmark.errors import BenchmarkError
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS

MRR = "mrr"
RECALL = "recall@"


class ConstantEmbedding(nn.Module):
    """Every node embedded as the zero vector: every pair the task scores ties."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, client: ClientData) -> Tensor:
        x = next(iter(client.features.values()))
        return x.new_zeros(client.num_nodes, self.dim)


def harmonic(n: int) -> float:
    """The n-th harmonic number H_n = 1 + 1/2 + ... + 1/n."""
    return float(sum(1.0 / k for k in range(1, n + 1)))


def random_ranking_row(row: dict[str, float]) -> dict[str, float]:
    """A retrieval split row with its ranking metrics replaced by their expectation under a
    uniformly random ranking of its ``n`` = G gallery items (unchanged when G < 2: NaN)."""
    g = int(row["n"])
    if g < 2:
        return dict(row)
    out = dict(row)
    for key in row:
        if key == MRR:
            out[key] = harmonic(g) / g
        elif key.startswith(RECALL):
            out[key] = min(int(key[len(RECALL):]), g) / g
    return out


@ALGORITHMS.register("chance")
class Chance(Algorithm):
    """Chance: majority training class (node_cls) or a uniformly random score (pairs, rankings); learns nothing else."""

    Config = None
    centralized = True
    constant_scores = True  # every score tied on purpose: the guard does not call it collapsed
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = ()

    def init_server(self) -> Payload:
        return {}

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        if self.ctx.task.classifies_nodes and "majority" not in state:
            labels = client.y[client.train_mask]
            counts = torch.bincount(labels.cpu(), minlength=max(1, self.ctx.num_classes))
            state["majority"] = int(counts.argmax())  # the first of equal counts: the lowest class id
        return {}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        return {}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        task = self.ctx.task
        if task.classifies_nodes:
            if "majority" not in state:
                raise BenchmarkError("chance: evaluated before the pooled client fitted its majority class")
            logits = next(iter(client.features.values())).new_zeros(client.num_nodes, self.ctx.num_classes)
            logits[:, state["majority"]] = 1.0
            return task.scores_from_logits(logits, client)
        scores = task.evaluate(ConstantEmbedding(task.out_dim(self.ctx.num_classes)), client)
        if task.ranks_gallery:
            scores = {split: random_ranking_row(row) for split, row in scores.items()}
        return scores
