"""Centralized training on the pooled graph (a reference, not an upper bound)."""

from __future__ import annotations

import torch
from torch import Tensor

from baselines.basic.fedavg import FedAvg
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("centralized")
class Centralized(FedAvg):
    """Centralized: one GNN trained on the pooled graph (every client's nodes and edges, same masks), scored on each client's data.

    A reference that pools every client's graph, not an upper bound: it trains the same
    model on the same (conditioned, filled) features without data silos, and a federated
    method with better imputation of the missing modalities can beat it. The engine gives
    it the pooled view instead of the clients; training is then FedAvg with a single client,
    on the task's own loss of that view (its training view: held-out rows, labels or edges
    hidden as for every client).

    Evaluation. Node classification runs the model on the pooled graph (no silo cuts a
    node's neighbourhood) and scores each client's own nodes; link prediction, retrieval and
    matching score the global model with the task's own ``evaluate`` on each client's own
    graph and split (those tasks' splits and galleries are per client). Either way the
    numbers are weighted over the same split nodes as every other method's.

    Link prediction trains on the pooled view's split, the union of the clients' splits
    (``LinkPrediction._pooled_split``): the clients' training edges and the edges between
    clients, never a client's validation or test edge
    (``tests/test_reference_algorithms.py`` checks there is no overlap).
    """

    centralized = True
    tasks = ("node_cls", "link_pred", "retrieval", "matching")

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        state["pooled"] = client
        return super().client_update(client, state, received, rnd)

    def _pooled_logits(self, state: dict, received: Payload) -> Tensor:
        key = id(received)
        if state.get("_logits_key") != key:
            model = self.eval_model(state, received)
            model.eval()
            with torch.no_grad():
                state["_logits"] = model(state["pooled"])
            state["_logits_key"] = key
        return state["_logits"]

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        task = self.ctx.task
        if not hasattr(task, "scores_from_logits"):  # paired tasks: per-client galleries on the client's graph
            return task.evaluate(self.eval_model(state, received), client)
        logits = self._pooled_logits(state, received)
        return task.scores_from_logits(logits[client.global_ids], client)
