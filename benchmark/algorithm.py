"""The Algorithm contract, and a base class for algorithms that train the shared model.

The engine drives an algorithm through these hooks and nothing else:

* ``init_server() -> broadcast``: the first message (one payload for all, or one per client).
* ``setup_upload / setup_aggregate / setup_receive``: an optional one-time exchange before
  training (FedGCN's neighbour aggregation); counted by the ledger as phase "setup".
* ``client_update(client, state, received, rnd) -> upload``: local training on one client.
  ``state`` is that client's private, persistent dict (its optimizer, personal model...).
* ``aggregate(uploads, rnd) -> broadcast``.
* ``evaluate(client, state, received) -> {split: {metric: value, "n": size}}``: the global
  model on the client's data, or the client's personal model when ``personalized``.

Payloads are flat ``dict[str, Tensor]``. A client only ever sees its own ``ClientData``.

Server hooks (``init_server``, ``setup_aggregate``, ``aggregate``) and client hooks
(``setup_*`` uploads and receives, ``client_update``, ``evaluate``) run on two different
instances of the class (``benchmark.roles``): a client hook has no server object, so it
rebuilds a broadcast model from what it received (:meth:`ModelAlgorithm.received_model`)
and keeps every memory in its ``state``. ``evaluate`` may take a keyword ``rnd`` (the
round just aggregated) when the evaluated model depends on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from benchmark import registry as R
from benchmark.comm import Payload
from benchmark.config import ModelConfig, RunConfig
from benchmark.federation import ClientData
from benchmark.models import multimodal as _multimodal  # noqa: F401  (registers multimodal_gnn)
from benchmark.tasks.base import Task
from benchmark.state_codec import state_class
from benchmark.training import LocalLoop, LoopLog, NonFiniteLoss

Broadcast = Payload | dict[int, Payload]
__all__ = ["AlgoContext", "Algorithm", "Broadcast", "ModelAlgorithm", "NonFiniteLoss", "load_model_payload",
           "model_payload", "weighted_average"]


@dataclass
class AlgoContext:
    """What an algorithm may know about the federation (metadata only, no client data)."""

    run: RunConfig
    task: Task
    modalities: list[str]
    feature_dims: dict[str, int]
    num_classes: int
    num_clients: int
    client_ids: list[int]
    num_global_nodes: int
    device: torch.device
    seed: int


@state_class  # a checkpoint holds the server's instance (subclasses inherit the mark)
class Algorithm(ABC):
    """Base of every federated algorithm (see the module docstring for the hooks)."""

    Config: ClassVar[type | None] = None
    personalized: ClassVar[bool] = False     # evaluate each client's own model
    centralized: ClassVar[bool] = False      # trains on the pooled graph (a reference)
    constant_scores: ClassVar[bool] = False  # scores every item alike by design (chance): never judged collapsed
    tasks: ClassVar[tuple[str, ...]] = ("node_cls",)
    upload_keys: ClassVar[tuple[str, ...] | None] = None   # regexes of declared upload names
    has_setup: ClassVar[bool] = False
    registry_name: ClassVar[str] = ""
    # raised when the method's computation changes with no config key to show it (a new
    # default, a reworked part): its stored records then go stale (benchmark/results.py)
    revision: ClassVar[int] = 1

    def __init__(self, cfg: Any, ctx: AlgoContext) -> None:
        self.cfg = cfg
        self.ctx = ctx

    @abstractmethod
    def init_server(self) -> Broadcast:
        """Create the server state and return the first broadcast."""

    def setup_upload(self, client: ClientData, state: dict) -> Payload:
        """One-time pre-training upload (only when ``has_setup``)."""
        return {}

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        """Server side of the one-time exchange: one reply per client."""
        return {cid: {} for cid in uploads}

    def setup_receive(self, client: ClientData, state: dict, payload: Payload) -> None:
        """Client side of the one-time exchange."""

    # ---------------------------------------------------------------- pre-training stages
    def pretraining(self) -> dict[str, Any] | None:
        """Config overrides of the stage this run starts from (``benchmark.stages``), e.g.
        ``{"algorithm": {"name": "fede"}, "train": {"rounds": 20}}``; None: no stage."""
        return None

    def export_server(self) -> dict[str, Tensor]:
        """The server's end state, by name, when this algorithm ran as a stage."""
        return {}

    def export_client(self, client: ClientData, state: dict) -> dict[str, Tensor]:
        """One client's end state, by name, when this algorithm ran as a stage."""
        return {}

    def start_from(self, server: dict[str, Tensor]) -> None:
        """Server side: receive the stage's server tensors before ``init_server`` (each
        client finds its own under ``state["warm_start"]``)."""

    @abstractmethod
    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        """Train locally from ``received``; return the upload."""

    @abstractmethod
    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Broadcast:
        """Combine the uploads into the next broadcast."""

    @abstractmethod
    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        """Scores on the client's splits under this algorithm's evaluation mode."""


# --------------------------------------------------------------------------- helpers


def model_payload(model: nn.Module, prefix: str = "model.") -> Payload:
    """Detached copies of a model's parameters and buffers."""
    return {prefix + k: v.detach().clone() for k, v in model.state_dict().items()}


def load_model_payload(model: nn.Module, payload: Payload, prefix: str = "model.") -> None:
    """Copy the ``prefix`` entries of a payload into the model, in place (keeps optimizer refs)."""
    state = {k[len(prefix):]: v for k, v in payload.items() if k.startswith(prefix)}
    with torch.no_grad():
        own = model.state_dict()
        for k, v in state.items():
            own[k].copy_(v)


def weighted_average(payloads: list[Payload], weights: list[float], keys: list[str] | None = None) -> Payload:
    """Per-key weighted mean of payloads (weights normalized)."""
    total = float(sum(weights))
    if total <= 0:
        weights, total = [1.0] * len(payloads), float(len(payloads))
    keys = keys if keys is not None else [k for k in payloads[0] if payloads[0][k].dtype.is_floating_point]
    return {k: sum(p[k] * (w / total) for p, w in zip(payloads, weights)) for k in keys}


class ModelAlgorithm(Algorithm):
    """Shared machinery for algorithms that train the multimodal GNN on each client.

    Keeps each client's model and Adam optimizer in its private state, so the optimizer
    state survives across rounds (docs/algorithms.md: clients keep their Adam state), and provides the local training
    loop with an optional extra loss term.
    """

    #: the registered model (``registry.MODELS``) every client trains; a method that needs
    #: another architecture registers it and names it here
    model_name: ClassVar[str] = "multimodal_gnn"

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        model_cls = R.MODELS.get(self.model_name)
        model = model_cls(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model)
        return model.to(ctx.device)

    def client_model(self, state: dict) -> tuple[nn.Module, torch.optim.Optimizer]:
        """The client's persistent model and optimizer (created on first use)."""
        if "model" not in state:
            model = self.build_model()
            train = self.ctx.run.train
            state["model"] = model
            state["opt"] = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
        return state["model"], state["opt"]

    def received_model(self, received: Payload, prefix: str = "model.") -> nn.Module:
        """A model holding the ``prefix`` entries of a received payload, built on the client
        side (evaluation of a global model needs no server object)."""
        model = self.build_model()
        load_model_payload(model, received, prefix)
        return model

    def local_train(self, model: nn.Module, opt: torch.optim.Optimizer, client: ClientData,
                    extra_loss: Callable[[nn.Module], Tensor] | None = None,
                    epochs: int | None = None) -> LoopLog:
        """Full-batch local epochs of the task's loss plus ``extra_loss(model)`` through the
        core loop (``benchmark.training``); a non-finite loss raises ``NonFiniteLoss``."""
        model.train()
        loop = LocalLoop.from_train(self.ctx.run.train, epochs)
        penalty = None if extra_loss is None else (lambda: extra_loss(model))
        return loop.run(lambda: self.ctx.task.loss(model, client), opt, model.parameters(), cid=client.cid,
                        penalty=penalty)

    def num_examples(self, client: ClientData) -> Tensor:
        return torch.tensor([float(client.num_train)])
