"""Centralized training on the pooled graph (the upper bound)."""

from __future__ import annotations

from torch import Tensor

from baselines.basic.fedavg import FedAvg
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("centralized")
class Centralized(FedAvg):
    """Centralized: one model on the whole graph (all edges, same masks), scored on each client's test nodes.

    The engine gives it the pooled view instead of the clients; training is then FedAvg
    with a single client. Evaluation runs the model on the pooled graph too (no data silos
    is what makes it the upper bound) and scores each client's own nodes, so the numbers
    are weighted over the same test nodes as every other method.
    """

    centralized = True
    tasks = ("node_cls",)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        state["pooled"] = client
        return super().client_update(client, state, received, rnd)

    def _pooled_logits(self, state: dict, received: Payload) -> Tensor:
        key = id(received)
        if state.get("_logits_key") != key:
            model = self.eval_model(state, received)
            model.eval()
            import torch

            with torch.no_grad():
                state["_logits"] = model(state["pooled"])
            state["_logits_key"] = key
        return state["_logits"]

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        logits = self._pooled_logits(state, received)
        return self.ctx.task.scores_from_logits(logits[client.global_ids], client)
