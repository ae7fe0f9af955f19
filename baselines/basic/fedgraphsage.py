"""FedGraphSAGE: FedAvg over a GraphSAGE (mean) backbone."""

from __future__ import annotations

import dataclasses

from torch import nn

from baselines.basic.fedavg import FedAvg
from benchmark.config import ModelConfig
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("fedgraphsage")
class FedGraphSAGE(FedAvg):
    """FedGraphSAGE: FedAvg with a 2-layer GraphSAGE-mean backbone, trained full-batch.

    Full-batch rather than neighbour-sampled: client subgraphs are small enough, and it
    removes sampling noise from the comparison with the GCN baselines.
    """

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        return super().build_model(dataclasses.replace(model_cfg or self.ctx.run.model, backbone="sage"))
