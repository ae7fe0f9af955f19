"""FedProx: FedAvg plus a proximal term towards the received global model."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from baselines.basic.fedavg import FedAvg, FedAvgConfig
from benchmark.comm import Payload
from benchmark.registry import ALGORITHMS


@dataclass
class FedProxConfig(FedAvgConfig):
    mu: float = field(default=1e-3, metadata={"help": "proximal weight mu; loss += mu/2 ||theta - theta_global||^2", "min": 0,
                                                 "tune": {"low": 1e-4, "high": 1.0, "log": True}})


@ALGORITHMS.register("fedprox")
class FedProx(FedAvg):
    """FedProx (Li et al., 2020): local loss + (mu/2) ||theta - theta_global||^2."""

    Config = FedProxConfig

    def extra_loss(self, received: Payload, state: dict):  # noqa: ANN201
        anchor = {k[len("model."):]: v.detach() for k, v in received.items() if k.startswith("model.")}
        mu = self.cfg.mu

        def prox(model: nn.Module) -> Tensor:
            terms = [((p - anchor[n]) ** 2).sum() for n, p in model.named_parameters() if n in anchor]
            return 0.5 * mu * torch.stack(terms).sum()

        return prox
