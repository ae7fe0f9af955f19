"""FedAvg with zero-filled missing modalities (FedAvg-Zero in FedMPO's tables)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@dataclass
class FedAvgConfig:
    weighting: str = field(default="train_size", metadata={"help": "aggregation weights: train_size (FedAvg paper) or uniform", "choices": ("train_size", "uniform")})


@ALGORITHMS.register("fedavg")
class FedAvg(ModelAlgorithm):
    """FedAvg-Zero: local epochs from the global model, size-weighted parameter average.

    Missing modalities enter as their fill value (zeros by default); the model does not
    know which are missing unless ``model.mask_missing`` is set.
    """

    Config = FedAvgConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "num_examples")

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        self.local_train(model, opt, client, self.extra_loss(received, state))
        return {**model_payload(model), "num_examples": self.num_examples(client)}

    def extra_loss(self, received: Payload, state: dict):  # noqa: ANN201 - hook for FedProx-like variants
        """A regularizer added to the task loss (none for FedAvg)."""
        return None

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        ups = list(uploads.values())
        weights = [float(u["num_examples"]) if self.cfg.weighting == "train_size" else 1.0 for u in ups]
        keys = [k for k in ups[0] if k.startswith("model.")]
        avg = weighted_average(ups, weights, keys)
        load_model_payload(self.global_model, avg)
        return avg

    def eval_model(self, state: dict, received: Payload) -> nn.Module:
        """The global model, rebuilt on the client side from the broadcast it received."""
        return self.received_model(received)

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.eval_model(state, received), client)
