"""HeteroFL w/ mask for AMFL (FedMBridge Appendix B.1.3; Diao et al., 2021).

Every client model is a fixed sub-network of the server supernet (``supernet.py``, the
paper's three merge rules); the mask is static, so it is never sent. Setup: each client
uploads its architecture (``arch.spec``) and receives its slice of the initial supernet.
Rounds: a client trains its slice and uploads it with its training-set size; the server
sets every supernet element to the size-weighted mean of the clients that hold it (an
element no sampled client holds keeps its value) and sends each client its new slice.
The personal model evaluated is the client's current slice of the supernet.
"""

from __future__ import annotations

import torch

from benchmark.comm import Payload
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import AMFLAlgorithm
from baselines.amfl.supernet import Supernet, spec_payload

PREFIX = "w."


def _load(model: torch.nn.Module, payload: Payload) -> None:
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(payload[PREFIX + n])


@ALGORITHMS.register("amfl_heterofl")
class HeteroFLMask(AMFLAlgorithm):
    """HeteroFL w/ mask (AMFL): each client trains its fixed slice of a supernet merged from all architectures."""

    has_setup = True
    upload_keys = (r"arch\.spec", r"w\..+", "num_examples")

    def init_server(self) -> Payload:
        self.supernet: Supernet | None = None
        return {}

    def setup_upload(self, client, state: dict) -> Payload:
        return spec_payload(client)

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        gen = torch.Generator().manual_seed(text_seed(self.ctx.seed, "heterofl/init"))
        self.supernet = Supernet.from_uploads(uploads, self.ctx.feature_dims, gen, self.ctx.device)
        return {cid: self._slice(cid) for cid in uploads}

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        model, _ = self.client_model(client, state)
        _load(model, payload)

    def _slice(self, cid: int) -> Payload:
        assert self.supernet is not None
        return {PREFIX + n: t for n, t in self.supernet.extract(cid).items()}

    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(client, state)
        if received:
            _load(model, received)
        self.local_train(model, opt, client, rnd)
        return {**{PREFIX + n: p.detach().clone() for n, p in model.named_parameters()},
                "num_examples": torch.tensor([float(client.num_train)], device=self.ctx.device)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        assert self.supernet is not None
        self.supernet.average({cid: {n[len(PREFIX):]: t for n, t in up.items() if n.startswith(PREFIX)}
                               for cid, up in uploads.items()},
                              {cid: float(up["num_examples"][0]) for cid, up in uploads.items()})
        return {cid: self._slice(cid) for cid in self.ctx.client_ids}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(client, state)
        if received:
            _load(model, received)
        return self.ctx.task.evaluate(model, client)
