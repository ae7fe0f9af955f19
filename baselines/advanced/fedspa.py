"""FedSPA: propagation decoupled by neighbour-pair type, aggregation by homophily bias and Fisher drift.

Tan et al., "FedSPA: Generalizable Federated Graph Learning under Homophily Heterogeneity", CVPR 2025.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS, FUSIONS
from benchmark.tasks.base import Task

SAME, DIFF, UNKNOWN = 0, 1, 2
FISHER_GROUPS = {"fr": "att_diff", "be": "att_same"}   # official names: "fr" heterophilous, "be" homophilous


@dataclass
class FedSPAConfig:
    temperature: float = field(default=7.0, metadata={"help": "softmax temperature of the 7-channel attention (official: 7)", "positive": True})


# --------------------------------------------------------------------------- propagation


def pair_types(edge_index: Tensor, y: Tensor, train_mask: Tensor) -> Tensor:
    """Per directed edge: SAME (both ends have training labels, equal), DIFF (both, different), else UNKNOWN."""
    known = torch.where(train_mask, y, torch.full_like(y, -1))
    a, b = known[edge_index[0]], known[edge_index[1]]
    types = torch.full_like(a, UNKNOWN)
    both = (a >= 0) & (b >= 0)
    types[both & (a == b)] = SAME
    types[both & (a != b)] = DIFF
    return types


def gcn_weights(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Edges with self-loops and their D^-1/2 (A + I) D^-1/2 weights (the low-pass filter)."""
    loops = torch.arange(num_nodes, device=edge_index.device)
    ei = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    deg = torch.bincount(ei[1], minlength=num_nodes).float()
    return ei, deg[ei[0]].rsqrt() * deg[ei[1]].rsqrt()


def _propagate(x: Tensor, ei: Tensor, w: Tensor) -> Tensor:
    return torch.zeros_like(x).index_add_(0, ei[1], x[ei[0]] * w.unsqueeze(1))


class SPALayer(nn.Module):
    """One SFPD layer: low-pass, high-pass and identity channels, the two filtered ones then
    split by neighbour-pair type, and a 7-way attention over the channels.

    Channels: {same, diff, unknown} x {low, high} neighbour sums (each normalized by the
    node's degree, so the three types add up to the plain neighbour mean) and the node's own
    MLP channel. An unknown-type channel is scored by a learned per-node mix (balance gate)
    of the different-class and same-class attention vectors, which is how SFPD maps edges of
    unknown homophily onto the two known kinds.
    """

    def __init__(self, d_in: int, d_out: int, temperature: float) -> None:
        super().__init__()
        self.w_low = nn.Linear(d_in, d_out, bias=False)
        self.w_high = nn.Linear(d_in, d_out, bias=False)
        self.w_mlp = nn.Linear(d_in, d_out, bias=False)

        def vec() -> nn.Parameter:
            return nn.Parameter(nn.init.xavier_uniform_(torch.empty(d_out, 1)))

        self.att_same_low, self.att_same_high = vec(), vec()
        self.att_diff_low, self.att_diff_high = vec(), vec()
        self.att_mlp = vec()
        self.att_mix = nn.Parameter(nn.init.xavier_uniform_(torch.empty(7, 7)))
        self.balance = nn.Linear(d_out, 1)
        self.temperature = temperature

    def forward(self, x: Tensor, edge_index: Tensor, types: Tensor, gcn: tuple[Tensor, Tensor]) -> Tensor:
        n = x.shape[0]
        ei, w = gcn
        low = torch.relu(_propagate(self.w_low(x), ei, w))
        xh = self.w_high(x)
        high = torch.relu(xh - _propagate(xh, ei, w))
        mlp = torch.relu(self.w_mlp(x))
        inv_deg = 1.0 / torch.bincount(edge_index[1], minlength=n).clamp_min(1).to(x.dtype)
        src, dst = edge_index
        chans = {}
        for t in (SAME, DIFF, UNKNOWN):
            keep = types == t
            for name, h in (("low", low), ("high", high)):
                agg = torch.zeros_like(h).index_add_(0, dst[keep], h[src[keep]])
                chans[(t, name)] = agg * inv_deg.unsqueeze(1)
        b_low = torch.sigmoid(self.balance(chans[(UNKNOWN, "low")]))
        b_high = torch.sigmoid(self.balance(chans[(UNKNOWN, "high")]))
        u_low, u_high = chans[(UNKNOWN, "low")], chans[(UNKNOWN, "high")]
        scores = torch.cat([
            chans[(DIFF, "low")] @ self.att_diff_low,
            chans[(DIFF, "high")] @ self.att_diff_high,
            chans[(SAME, "low")] @ self.att_same_low,
            chans[(SAME, "high")] @ self.att_same_high,
            b_low * (u_low @ self.att_diff_low) + (1 - b_low) * (u_low @ self.att_same_low),
            b_high * (u_high @ self.att_diff_high) + (1 - b_high) * (u_high @ self.att_same_high),
            mlp @ self.att_mlp,
        ], dim=1)
        att = torch.softmax(torch.sigmoid(scores) @ self.att_mix / self.temperature, dim=1)
        stack = torch.stack([chans[(DIFF, "low")], chans[(DIFF, "high")], chans[(SAME, "low")],
                             chans[(SAME, "high")], u_low, u_high, mlp], dim=1)
        return 7 * (att.unsqueeze(-1) * stack).sum(1)


class SPANet(nn.Module):
    """Per-modality encoders and fusion (as MultimodalGNN), then SPA layers, then a linear head."""

    def __init__(self, feature_dims: dict[str, int], out_dim: int, cfg: ModelConfig, temperature: float,
                 typed: bool = True) -> None:
        super().__init__()
        self.typed = typed   # False: no labels, every edge is UNKNOWN
        self.modalities = list(feature_dims)
        self.mask_missing = cfg.mask_missing
        self.encoders = nn.ModuleDict({m: nn.Linear(d, cfg.hidden) for m, d in feature_dims.items()})
        self.fusion = FUSIONS.get(cfg.fusion)(cfg.hidden, len(self.modalities))
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([SPALayer(cfg.hidden, cfg.hidden, temperature) for _ in range(cfg.layers)])
        self.head = nn.Linear(cfg.hidden, out_dim)

    def embed(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        feats = features if features is not None else client.features
        h = torch.stack([torch.relu(self.encoders[m](feats[m])) for m in self.modalities], dim=1)
        x = self.dropout(self.fusion(h, client.available if self.mask_missing else None))
        if self.typed:
            types = pair_types(client.edge_index, client.y, client.train_mask)
        else:
            types = torch.full_like(client.edge_index[0], UNKNOWN)
        gcn = gcn_weights(client.edge_index, client.num_nodes)
        for i, layer in enumerate(self.layers):
            x = layer(x, client.edge_index, types, gcn)
            x = torch.relu(x)
            if i < len(self.layers) - 1:
                x = self.dropout(x)
        return x

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        return self.head(self.embed(client, features))


# --------------------------------------------------------------------------- client statistics


def train_homophily(edge_index: Tensor, y: Tensor, train_mask: Tensor) -> tuple[float, int]:
    """Edge homophily over edges whose two ends are training nodes, and the number of such edges."""
    types = pair_types(edge_index, y, train_mask)
    known = types != UNKNOWN
    count = int(known.sum())
    return (float((types[known] == SAME).float().mean()) if count else 0.0), count


def fisher_diagonal(model: nn.Module, client: ClientData, names: list[str]) -> dict[str, Tensor]:
    """Squared gradient of the mean training log-likelihood w.r.t. the named parameters (eval mode)."""
    was = model.training
    model.eval()
    params = dict(model.named_parameters())
    logp = torch.log_softmax(model(client), dim=1)
    train = client.train_mask
    ll = logp[train].gather(1, client.y[train].unsqueeze(1)).mean()
    grads = torch.autograd.grad(ll, [params[n] for n in names], allow_unused=True)
    model.train(was)
    return {n: (torch.zeros_like(params[n]) if g is None else g.detach().pow(2)) for n, g in zip(names, grads)}


def task_fisher_diagonal(model: nn.Module, task: Task, client: ClientData, names: list[str]) -> dict[str, Tensor]:
    """Label-free tasks: squared gradient of the task's own training loss (a mean NLL) (eval mode).

    The task builds its training forward pass itself (link prediction: the training message
    graph only), so no held-out edge enters.
    """
    was = model.training
    model.eval()
    params = dict(model.named_parameters())
    loss = task.loss(model, client)
    grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    model.train(was)
    return {n: (torch.zeros_like(params[n]) if g is None else g.detach().pow(2)) for n, g in zip(names, grads)}


# --------------------------------------------------------------------------- server weights


def bias_weights(values: Tensor) -> Tensor:
    """Lower bias, larger weight: softmax(-minmax(values)); uniform when all are equal."""
    v = values.double()
    span = v.max() - v.min()
    if span <= 1e-12:
        return torch.full_like(v, 1.0 / v.numel()).float()
    w = torch.exp(-(v - v.min()) / span)
    return (w / w.sum()).float()


def fisher_group_weights(fishers: list[dict[str, Tensor]], group_names: list[str]) -> Tensor:
    """Per-client weights from the L1 distance of its Fisher diagonal to the clients' mean (one group)."""
    mean = {n: torch.stack([f[n] for f in fishers]).mean(0) for n in group_names}
    d = torch.stack([sum((f[n] - mean[n]).abs().sum() for n in group_names) for f in fishers]).double()
    if d.sum() > 0:
        d = d / d.sum()
    return bias_weights(d)


def homophily_bias(homophily: Tensor, counts: Tensor) -> Tensor:
    """|h_c - h_bar|, h_bar the labelled-edge-weighted mean; clients without labelled edges get the mean bias."""
    known = counts > 0
    if not known.any():
        return torch.zeros_like(homophily)
    h_bar = (homophily[known] * counts[known]).sum() / counts[known].sum()
    bias = (homophily - h_bar).abs()
    return torch.where(known, bias, bias[known].mean())


@ALGORITHMS.register("fedspa")
class FedSPA(ModelAlgorithm):
    """FedSPA (Tan et al., CVPR 2025): type-decoupled propagation (SFPD), homophily-bias aggregation (HBDA).

    * SFPD: every layer has low-pass (GCN), high-pass (I - GCN) and identity channels; the
      filtered ones are split by neighbour-pair type (same class, different class, unknown,
      from TRAINING labels only), giving 7 channels combined by attention (see ``SPALayer``).
      The multimodal encoders and fusion feed the first layer.
    * HBDA: after local training a client uploads its model, the diagonal Fisher information
      (squared gradient of the mean log-likelihood of its TRAINING nodes) of the
      heterophilous ("fr") and homophilous ("be") attention vectors, and its edge homophily
      over training-labelled edges. The server weights each client per group by
      softmax(-minmax(normalized L1 distance of its Fisher to the mean Fisher)) for the
      attention vectors of that group, and by softmax(-minmax(|h_c - h_bar|)) for every
      other parameter. Non-personalized: the global model is evaluated.

    Test-label leak fixed: the official code computes the Fisher on the server from all of a
    client's labels (test nodes included); here the client computes it on training nodes.
    [guess] The official "radio_diff" homophily bias is not defined in the released code;
    we use the deviation of the client's training-edge homophily from the federation's
    labelled-edge-weighted mean. Degree normalization of the type-split sums (the official
    code sums) is our choice for scale stability across degrees.

    Label-free tasks (link_pred, retrieval, matching), [guess]: no edge has a known pair
    type, so every edge is UNKNOWN (the low/high-pass channels and the balance gate remain,
    the same/different-class channels are empty); the Fisher is the squared gradient of the
    task's own training loss (its negative log-likelihood) instead of the NC log-likelihood;
    no edge is labelled, so no homophily is uploaded and the "other" weights are uniform
    (what HBDA gives when no client has labelled edges). The model is called only through
    the task (link_pred: on its training message graph), so held-out edges never enter.
    """

    Config = FedSPAConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", r"fisher\..+", "homophily", "homophily_edges", "num_examples")

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        net = SPANet(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model,
                     self.cfg.temperature, typed=self._labelled())
        return net.to(ctx.device)

    def _labelled(self) -> bool:
        return self.ctx.task.classifies_nodes

    def _group_params(self, model: nn.Module) -> dict[str, list[str]]:
        names = [n for n, _ in model.named_parameters()]
        return {g: [n for n in names if f".{key}_" in n] for g, key in FISHER_GROUPS.items()}

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        self.groups = self._group_params(self.global_model)
        return model_payload(self.global_model)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        self.local_train(model, opt, client)
        names = [n for group in self._group_params(model).values() for n in group]
        if not self._labelled():
            fisher = task_fisher_diagonal(model, self.ctx.task, client, names)
            return {**model_payload(model), **{f"fisher.{n}": v for n, v in fisher.items()},
                    "num_examples": self.num_examples(client)}
        fisher = fisher_diagonal(model, client, names)
        h, count = train_homophily(client.edge_index, client.y, client.train_mask)
        dev = self.ctx.device
        return {**model_payload(model), **{f"fisher.{n}": v for n, v in fisher.items()},
                "homophily": torch.tensor([h], device=dev), "homophily_edges": torch.tensor([float(count)], device=dev),
                "num_examples": self.num_examples(client)}

    def aggregation_weights(self, uploads: list[Payload]) -> dict[str, Tensor]:
        """'fr', 'be': Fisher-drift weights per group; 'other': homophily-bias weights."""
        fishers = [{k[len("fisher."):]: v for k, v in u.items() if k.startswith("fisher.")} for u in uploads]
        out = {g: fisher_group_weights(fishers, names) for g, names in self.groups.items()}
        if not self._labelled():
            out["other"] = torch.full((len(uploads),), 1.0 / len(uploads))
            return out
        hom = torch.cat([u["homophily"].reshape(1) for u in uploads]).cpu()
        cnt = torch.cat([u["homophily_edges"].reshape(1) for u in uploads]).cpu()
        out["other"] = bias_weights(homophily_bias(hom, cnt))
        return out

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        ups = [uploads[c] for c in sorted(uploads)]
        weights = self.aggregation_weights(ups)
        member = {n: g for g, names in self.groups.items() for n in names}
        out: Payload = {}
        for key in (k for k in ups[0] if k.startswith("model.")):
            w = weights[member.get(key[len("model."):], "other")].to(ups[0][key].device)
            out[key] = sum(u[key] * w[i] for i, u in enumerate(ups))
        load_model_payload(self.global_model, out)
        return out

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.received_model(received), client)
