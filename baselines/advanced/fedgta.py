"""FedGTA: topology-aware personalized aggregation from label-propagation moments.

Li et al., "FedGTA: Topology-aware Averaging for Federated Graph Learning", VLDB 2024.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@dataclass
class FedGTAConfig:
    prop_steps: int = field(default=5, metadata={"help": "label-propagation steps K (paper: 5)", "min": 0, "max": 10_000})
    alpha: float = field(default=0.5, metadata={"help": "propagation weight: Y <- alpha A_hat Y + (1 - alpha) Y0 (paper: 0.5)", "probability": True})
    moments: int = field(default=10, metadata={"help": "highest moment order of the propagated soft labels (paper: 10; origin + centered)", "min": 1, "max": 1_000})
    accept_alpha: float = field(default=0.5, metadata={"help": "cosine threshold above which another client's model joins the aggregate (paper: 0.5)", "min": -1, "max": 1})
    temperature: float = field(default=20.0, metadata={"help": "softmax temperature of the confidence (entropy) term (paper: 20)", "positive": True})


def propagate_labels(soft: Tensor, edge_index: Tensor, y: Tensor, train_mask: Tensor,
                     steps: int, alpha: float) -> Tensor:
    """K steps of Y <- alpha A_hat Y + (1 - alpha) Y0, A_hat = D^-1/2 (A + I) D^-1/2.

    Y0 holds the one-hot training labels on training rows and the model's soft labels
    elsewhere (FedGTA Sec. 4.1, "topology-aware smoothing").
    """
    c = soft.shape[1]
    y0 = soft.clone()
    y0[train_mask] = F.one_hot(y[train_mask], c).to(soft.dtype)
    return smooth(y0, edge_index, steps, alpha)


def smooth(y0: Tensor, edge_index: Tensor, steps: int, alpha: float) -> Tensor:
    """K steps of Y <- alpha A_hat Y + (1 - alpha) Y0 over ``edge_index`` (self-loops added)."""
    n = y0.shape[0]
    loops = torch.arange(n, device=y0.device)
    src = torch.cat([edge_index[0], loops])
    dst = torch.cat([edge_index[1], loops])
    deg = torch.bincount(dst, minlength=n).to(y0.dtype)
    norm = deg[src].rsqrt() * deg[dst].rsqrt()
    out = y0
    for _ in range(steps):
        agg = torch.zeros_like(out).index_add_(0, dst, out[src] * norm.unsqueeze(1))
        out = alpha * agg + (1 - alpha) * y0
    return out


def hybrid_moments(x: Tensor, order: int) -> Tensor:
    """Origin moments E[x^p] and centered moments E[(x - E x)^p], p = 1..order, over nodes, flattened."""
    centered = x - x.mean(0, keepdim=True)
    origin = [x.pow(p).mean(0) for p in range(1, order + 1)]
    central = [centered.pow(p).mean(0) for p in range(1, order + 1)]
    return torch.cat(origin + central)


def confidence(q: Tensor, degree: Tensor, eps: float = 1e-8) -> Tensor:
    """sum_v deg_v (C/e + sum_c q_vc log q_vc): degree-weighted negative entropy, shifted to be >= 0.

    x log x >= -1/e, so every node contributes a non-negative amount that grows as its
    (tempered) prediction gets sharper; FedGTA uses it as the client's aggregation weight.
    """
    c = q.shape[1]
    neg_entropy = (q * torch.log(q + eps)).sum(1)
    return (degree * (c * math.exp(-1) + neg_entropy)).sum().clamp_min(0.0)


def gta_mixing(moments: Tensor, weights: Tensor, accept: float) -> Tensor:
    """Row i: aggregation weights of client i over all uploaders (FedGTA Sec. 4.2).

    Client j enters client i's aggregate iff cos(mu_i, mu_j) > ``accept`` (i always enters
    its own); members are weighted by their confidence w_j and the row is normalized. A row
    whose confidences sum to zero falls back to uniform weights over its members.
    """
    mu = F.normalize(moments.double(), dim=1)
    member = (mu @ mu.T) > accept
    member |= torch.eye(len(moments), dtype=torch.bool, device=moments.device)
    w = member.double() * weights.double().clamp_min(0.0).unsqueeze(0)
    empty = w.sum(1, keepdim=True) <= 0
    w = torch.where(empty, member.double(), w)
    return (w / w.sum(1, keepdim=True)).float()


@ALGORITHMS.register("fedgta")
class FedGTA(ModelAlgorithm):
    """FedGTA (Li et al., VLDB 2024): each client gets a confidence-weighted average of the
    models whose topology-aware label statistics resemble its own.

    After local CE training a client propagates its soft labels over its subgraph (K = 5,
    alpha = 0.5), uploads the hybrid moments (orders 1..10) of softmax(Y) over its nodes
    and a confidence w from the degree-weighted entropy of softmax(Y / 20) (training rows
    set to their one-hot labels in both, as in the official code). The server builds, for
    every client i, theta_i = sum_{j in N_i} w_j theta_j / sum w_j with
    N_i = {j: cos(mu_i, mu_j) > 0.5} (always containing i). Personalized: each client
    evaluates the model it received and then trained.

    Link prediction, retrieval, matching [guess]: there are no classes, so the soft
    assignment is the softmax of the model's output embedding on the full client (both
    modalities present), with no one-hot rows, propagated over the graph the task trains
    on (link prediction: the training edges only, never held-out ones; paired tasks: the
    client's edges, with the validation/test nodes' query and gallery rows hidden as the
    task's training view hides them); the same moments and confidence follow.
    """

    Config = FedGTAConfig
    personalized = True
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "moments", "confidence", "num_examples")

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    def _statistics(self, logits: Tensor, client: ClientData) -> tuple[Tensor, Tensor]:
        cfg = self.cfg
        soft = torch.softmax(logits, dim=1)
        y_prop = propagate_labels(soft, client.edge_index, client.y, client.train_mask, cfg.prop_steps, cfg.alpha)
        onehot = F.one_hot(client.y[client.train_mask], soft.shape[1]).to(soft.dtype)
        raw = torch.softmax(y_prop, dim=1)
        dis = torch.softmax(y_prop / cfg.temperature, dim=1)
        raw[client.train_mask] = onehot
        dis[client.train_mask] = onehot
        degree = torch.bincount(client.edge_index[1], minlength=client.num_nodes).to(soft.dtype)
        return hybrid_moments(raw, cfg.moments), confidence(dis, degree).reshape(1)

    def statistics_graph(self, client: ClientData) -> ClientData:
        """The client the label-free statistics are computed on: the task's training view
        (retrieval, matching: no validation/test node's query or gallery row) with the edges
        the task lets an algorithm know (link prediction: training edges only, never a
        validation or test edge), else the client itself."""
        task = self.ctx.task
        return dataclasses.replace(task.training_view(client), edge_index=task.known_edges(client))

    def label_free_statistics(self, model: nn.Module, graph: ClientData) -> tuple[Tensor, Tensor]:
        """Moments and confidence without labels: softmax of the output embedding on ``graph``
        (all modalities present) smoothed over ``graph``'s edges, no one-hot rows."""
        cfg = self.cfg
        soft = torch.softmax(model(graph), dim=1)
        y_prop = smooth(soft, graph.edge_index, cfg.prop_steps, cfg.alpha)
        raw = torch.softmax(y_prop, dim=1)
        dis = torch.softmax(y_prop / cfg.temperature, dim=1)
        degree = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes).to(soft.dtype)
        return hybrid_moments(raw, cfg.moments), confidence(dis, degree).reshape(1)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        self.local_train(model, opt, client)
        model.eval()
        with torch.no_grad():
            if self.ctx.task.classifies_nodes:
                moments, conf = self._statistics(model(client), client)
            else:
                moments, conf = self.label_free_statistics(model, self.statistics_graph(client))
        return {**model_payload(model), "moments": moments, "confidence": conf,
                "num_examples": self.num_examples(client)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        cids = sorted(uploads)
        ups = [uploads[c] for c in cids]
        keys = [k for k in ups[0] if k.startswith("model.")]
        mix = gta_mixing(torch.stack([u["moments"] for u in ups]),
                         torch.cat([u["confidence"].reshape(1) for u in ups]), self.cfg.accept_alpha)
        out = {c: weighted_average(ups, mix[i].tolist(), keys) for i, c in enumerate(cids)}
        # clients that sat this round out get the confidence-weighted average of all uploads
        glob = weighted_average(ups, [float(u["confidence"]) for u in ups], keys)
        load_model_payload(self.global_model, glob)
        return {c: out.get(c, glob) for c in self.ctx.client_ids}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(state)
        return self.ctx.task.evaluate(model, client)
