"""FedProto: clients share per-class prototypes instead of model weights."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.algorithm import ModelAlgorithm
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@dataclass
class FedProtoConfig:
    lam: float = field(default=1.0, metadata={"help": "weight of the prototype-alignment MSE term", "min": 0})


@ALGORITHMS.register("fedproto")
class FedProto(ModelAlgorithm):
    """FedProto (Tan et al., 2022): CE + lambda * MSE(embedding, global class prototype).

    Prototypes are mean pre-classifier embeddings of training nodes (eval mode); the server
    averages each class over the clients that have it, weighted by class counts. The term
    is skipped in round 0 (no global prototypes yet). Models stay local: evaluation uses
    each client's own model (personalized).
    """

    Config = FedProtoConfig
    personalized = True
    upload_keys = ("protos", "proto_counts")

    def init_server(self) -> Payload:
        return {}

    def _align_loss(self, client: ClientData, received: Payload):  # noqa: ANN202
        if "protos" not in received:
            return None
        protos, has = received["protos"], received["proto_counts"] > 0
        mask = client.train_mask & has[client.y]
        lam = self.cfg.lam

        def loss(model: nn.Module) -> Tensor:
            if not mask.any():
                return torch.zeros((), device=protos.device)
            h = model.embed(client)
            return lam * F.mse_loss(h[mask], protos[client.y[mask]])

        return loss

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        self.local_train(model, opt, client, self._align_loss(client, received))
        model.eval()
        with torch.no_grad():
            h = model.embed(client)[client.train_mask]
            y = client.y[client.train_mask]
        k = self.ctx.num_classes
        counts = torch.bincount(y, minlength=k).to(h.dtype)
        sums = torch.zeros(k, h.shape[1], device=h.device).index_add_(0, y, h)
        protos = sums / counts.clamp_min(1).unsqueeze(1)
        return {"protos": protos, "proto_counts": counts}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        counts = torch.stack([u["proto_counts"] for u in uploads.values()])          # [K, C]
        protos = torch.stack([u["protos"] for u in uploads.values()])                # [K, C, h]
        total = counts.sum(0)
        glob = (protos * counts.unsqueeze(-1)).sum(0) / total.clamp_min(1).unsqueeze(-1)
        return {"protos": glob, "proto_counts": total}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(state)
        return self.ctx.task.evaluate(model, client)
