"""MH-pFLID: personal local models, a small shared messenger, injection then distillation.

Xie et al., "MH-pFLID: Model Heterogeneous personalized Federated Learning via Injection
and Distillation for Medical Data Analysis", ICML 2024 (arXiv 2405.06822).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines.multimodal.common import cap, optimize
from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.models.multimodal import MultimodalGNN
from benchmark.registry import ALGORITHMS
from benchmark.tasks.base import Task

PREFIX = "messenger."


@dataclass
class MHpFLIDConfig:
    messenger_ratio: float = field(default=0.25, metadata={"help": "messenger hidden size as a fraction of model.hidden (at least 8)", "positive": True, "max": 1})
    inject_local: float = field(default=0.9, metadata={"help": "injection: weight of the local model's task loss", "min": 0})
    inject_receiver: float = field(default=0.1, metadata={"help": "injection: weight of the task loss through receiver + messenger head", "min": 0})
    distill_task: float = field(default=0.9, metadata={"help": "distillation: weight of the messenger's task loss", "min": 0})
    distill_kl: float = field(default=0.1, metadata={"help": "distillation: weight of KL(local || messenger)", "min": 0})
    kd_temperature: float = field(default=1.0, metadata={"help": "softmax temperature of the class distributions (node classification)", "positive": True})
    relation_temperature: float = field(default=0.1, metadata={"help": "temperature of the similarity distributions distilled on embedding tasks", "positive": True})
    relation_nodes: int = field(default=256, metadata={"help": "nodes in one similarity distribution on embedding tasks (random subset above it)", "min": 2, "max": 1_000_000})


class ReceiverView(nn.Module):
    """The local model's embeddings through the receiver into the (frozen) messenger head.

    The task sees it as an ordinary model, so "the task loss through the receiver" works
    for every task. The messenger head enters detached: injection changes local weights only.
    """

    def __init__(self, local: MultimodalGNN, receiver: nn.Linear, head: nn.Linear) -> None:
        super().__init__()
        self.local, self.receiver, self.head = local, receiver, head

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        h = torch.relu(self.receiver(self.local.embed(client, features)))
        return F.linear(h, self.head.weight.detach(), self.head.bias.detach())


def task_log_distribution(task: Task, model: nn.Module, client: ClientData, nodes: Tensor,
                          kd_temperature: float, relation_temperature: float) -> Tensor:
    """Row-wise log-distributions a model assigns on ``nodes`` (what is distilled).

    Node classification: class probabilities. Link prediction: each node's softmax over
    cosine similarities to the other sampled nodes (training message graph). Retrieval and
    matching: each query's softmax over the sampled galleries. The embedding-task versions
    compare two models whose output spaces differ (local and messenger), which relations do.
    Every forward pass runs on the task's training view (no held-out edge or pair).
    """
    if task.classifies_nodes:
        return F.log_softmax(model(client)[nodes] / kd_temperature, dim=-1)
    if task.paired:
        zq, zg, _ = task.views(model, task.training_view(client))
        logits = zq[nodes] @ zg[nodes].T / relation_temperature
        return F.log_softmax(logits, dim=-1)
    z = F.normalize(model(task.training_view(client))[nodes], dim=-1)
    logits = z @ z.T / relation_temperature
    k = nodes.numel()
    off = ~torch.eye(k, dtype=torch.bool, device=logits.device)
    return F.log_softmax(logits[off].view(k, k - 1), dim=-1)


def distill_nodes(task: Task, client: ClientData, limit: int) -> Tensor:
    """Nodes whose distributions are distilled: the task's training nodes (with both modalities on
    paired tasks; any node on link prediction, where no node label is involved), at most ``limit``."""
    return cap(torch.nonzero(task.training_nodes(client)).flatten(), limit)


@ALGORITHMS.register("mh_pflid")
class MHpFLID(ModelAlgorithm):
    """MH-pFLID adapted to graphs: personal GNN + receiver, shared small messenger GNN.

    Each round, on each client:

    1. Injection (local_epochs steps): 0.9 * task loss of the personal model + 0.1 * task
       loss of the personal model's embeddings sent through the client's receiver (a linear
       map into the messenger's hidden size) and the received messenger's head (frozen).
       Global knowledge enters the personal model through that shared head.
    2. Distillation (local_epochs steps): 0.9 * task loss of the messenger + 0.1 *
       KL(personal || messenger) of their output distributions (class probabilities on node
       classification; similarity distributions on the embedding tasks, our adaptation).

    Only the messenger (the same multimodal GNN at ``messenger_ratio`` of the hidden size)
    is uploaded and size-weighted averaged; the personal model and receiver never leave the
    client, and evaluation is personalized. The paper's receiver/transmitter modules are
    described loosely; this layout follows a third-party reproduction (a guess; docs/algorithms.md).
    """

    Config = MHpFLIDConfig
    personalized = True
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"messenger\..+", "num_examples")

    def messenger_hidden(self) -> int:
        return max(8, int(round(self.ctx.run.model.hidden * self.cfg.messenger_ratio)))

    def build_messenger(self) -> MultimodalGNN:
        ctx = self.ctx
        mcfg = dataclasses.replace(ctx.run.model, hidden=self.messenger_hidden())
        return MultimodalGNN(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), mcfg).to(ctx.device)

    def init_server(self) -> Payload:
        self.global_messenger = self.build_messenger()
        return model_payload(self.global_messenger, PREFIX)

    def client_state(self, state: dict) -> dict:
        """Personal model + receiver (one Adam) and the client's messenger copy (its own Adam)."""
        if "model" not in state:
            train = self.ctx.run.train
            local = self.build_model()
            receiver = nn.Linear(self.ctx.run.model.hidden, self.messenger_hidden()).to(self.ctx.device)
            messenger = self.build_messenger()
            state.update(
                model=local, receiver=receiver, messenger=messenger,
                opt=torch.optim.Adam([*local.parameters(), *receiver.parameters()], lr=train.lr,
                                     weight_decay=train.weight_decay),
                mopt=torch.optim.Adam(messenger.parameters(), lr=train.lr, weight_decay=train.weight_decay))
        return state

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        s = self.client_state(state)
        local, receiver, messenger = s["model"], s["receiver"], s["messenger"]
        load_model_payload(messenger, received, PREFIX)
        task, cfg, train = self.ctx.task, self.cfg, self.ctx.run.train
        through = ReceiverView(local, receiver, messenger.head)

        def injection() -> Tensor:
            return cfg.inject_local * task.loss(local, client) + cfg.inject_receiver * task.loss(through, client)

        local.train()
        optimize(s["opt"], [*local.parameters(), *receiver.parameters()], injection, train.local_epochs,
                 train.grad_clip, client.cid)

        nodes = distill_nodes(task, client, cfg.relation_nodes)
        use_kl = cfg.distill_kl > 0 and nodes.numel() >= 2
        if use_kl:
            local.eval()
            with torch.no_grad():
                teacher = task_log_distribution(task, local, client, nodes, cfg.kd_temperature, cfg.relation_temperature)

        def distillation() -> Tensor:
            loss = cfg.distill_task * task.loss(messenger, client)
            if use_kl:
                student = task_log_distribution(task, messenger, client, nodes, cfg.kd_temperature,
                                                cfg.relation_temperature)
                loss = loss + cfg.distill_kl * F.kl_div(student, teacher, log_target=True, reduction="batchmean")
            return loss

        messenger.train()
        optimize(s["mopt"], messenger.parameters(), distillation, train.local_epochs, train.grad_clip, client.cid)
        return {**model_payload(messenger, PREFIX), "num_examples": self.num_examples(client)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        ups = [uploads[c] for c in sorted(uploads)]
        keys = [k for k in ups[0] if k.startswith(PREFIX)]
        avg = weighted_average(ups, [float(u["num_examples"]) for u in ups], keys)
        load_model_payload(self.global_messenger, avg, PREFIX)
        return avg

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.client_state(state)["model"], client)
