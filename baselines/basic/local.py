"""Local training: every client alone, no communication (the lower reference)."""

from __future__ import annotations

from benchmark.algorithm import ModelAlgorithm
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("local")
class Local(ModelAlgorithm):
    """Local: each client trains its own model on its own data; nothing is sent."""

    personalized = True
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = ()

    def init_server(self) -> Payload:
        return {}

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        self.local_train(model, opt, client)
        return {}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        return {}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(state)
        return self.ctx.task.evaluate(model, client)
