"""Centralized training on the pooled graph (the upper bound)."""

from __future__ import annotations

from benchmark.registry import ALGORITHMS
from baselines.basic.fedavg import FedAvg


@ALGORITHMS.register("centralized")
class Centralized(FedAvg):
    """Centralized: one model on the whole graph (all edges, same masks), scored per client.

    The engine gives it the pooled view instead of the clients; it is then FedAvg with one
    client. Its test score is computed on each client's own subgraph, like every method.
    """

    centralized = True
