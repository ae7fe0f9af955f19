"""Local for AMFL (Appendix B.1.1): every client trains its own architecture alone."""

from __future__ import annotations

from benchmark.comm import Payload
from benchmark.registry import ALGORITHMS
from baselines.amfl.common import AMFLAlgorithm


@ALGORITHMS.register("amfl_local")
class AMFLLocal(AMFLAlgorithm):
    """Local (AMFL): each client trains its own architecture on its own data; nothing is sent."""

    upload_keys = ()

    def init_server(self) -> Payload:
        return {}

    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(client, state)
        self.local_train(model, opt, client, rnd)
        return {}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        return {}
