"""FedPub: personalized subgraph FL with functional embeddings and weight masks.

Baek et al., "Personalized Subgraph Federated Learning", ICML 2023.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from benchmark.algorithm import AlgoContext, ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.models.multimodal import MultimodalGNN
from benchmark.registry import ALGORITHMS

PROXY_PREFIX = "proxy."


@dataclass
class FedPubConfig:
    l1: float = field(default=1e-3, metadata={"help": "weight of the L1 sparsity term on the weight masks (FedPub paper: 1e-3)", "min": 0})
    loc_l2: float = field(default=1e-3, metadata={"help": "weight of the (non-squared) L2 proximal term ||theta - theta_received||_2 (paper: 1e-3)", "min": 0})
    agg_norm: str = field(default="exp", metadata={"help": "similarity normalization: exp (paper, exp(norm_scale * cos) row-normalized) or linear (cos clipped at 0, row-normalized)", "choices": ("exp", "linear")})
    norm_scale: float = field(default=10.0, metadata={"help": "temperature of the exp similarity normalization (paper: 10)", "min": 0})
    proxy_blocks: int = field(default=5, metadata={"help": "blocks of the server's random proxy graph (paper: 5)", "min": 1, "max": 100_000})
    proxy_block_size: int = field(default=100, metadata={"help": "nodes per block of the proxy graph (paper: 100)", "min": 1, "max": 1_000_000})
    proxy_p_in: float = field(default=0.1, metadata={"help": "edge probability inside a proxy block (paper: 0.1; no edges between blocks)", "probability": True})


def _mask_key(name: str) -> str:
    """ParameterDict keys may not contain dots."""
    return name.replace(".", "__")


class _EmbedView(nn.Module):
    """Exposes ``MultimodalGNN.embed`` as ``forward`` so ``functional_call`` can reach it."""

    def __init__(self, net: MultimodalGNN) -> None:
        super().__init__()
        self.net = net

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        return self.net.embed(client, features)


class MaskedMultimodalGNN(nn.Module):
    """The shared multimodal GNN with a learnable elementwise mask on every weight matrix.

    FedPub (Sec. 4.2) multiplies each GNN and classifier weight by a personal mask (init 1,
    kept sparse by an L1 term) so that a client can switch off parts of the aggregated model
    that do not fit its community. Here every >=2-D ``weight`` of the encoders, fusion,
    backbone and head is masked. The raw weights live in ``net`` (the part that is shared);
    the masks in ``masks`` (never uploaded). The forward pass substitutes ``weight * mask``
    through ``torch.func.functional_call``, leaving ``benchmark.models`` untouched.
    """

    def __init__(self, net: MultimodalGNN) -> None:
        super().__init__()
        self.net = net
        self.masked_names = [n for n, p in net.named_parameters() if n.endswith("weight") and p.dim() >= 2]
        params = dict(net.named_parameters())
        self.masks = nn.ParameterDict({_mask_key(n): nn.Parameter(torch.ones_like(params[n])) for n in self.masked_names})

    def masked_params(self) -> dict[str, Tensor]:
        """``name -> weight * mask`` for every masked weight (differentiable in both)."""
        params = dict(self.net.named_parameters())
        return {n: params[n] * self.masks[_mask_key(n)] for n in self.masked_names}

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        return functional_call(self.net, self.masked_params(), (client, features))

    def embed(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        """Pre-head node embeddings of the masked model (the functional embedding uses them)."""
        view = _EmbedView(self.net)
        params = {"net." + n: v for n, v in self.masked_params().items()}
        return functional_call(view, params, (client, features))


def random_partition_graph(blocks: int, block_size: int, p_in: float, generator: torch.Generator) -> Tensor:
    """Undirected edge index (both directions) of a random partition graph with p_out = 0."""
    edges = []
    iu = torch.triu_indices(block_size, block_size, offset=1)
    for b in range(blocks):
        keep = torch.rand(iu.shape[1], generator=generator) < p_in
        e = iu[:, keep] + b * block_size
        edges.append(torch.cat([e, e.flip(0)], dim=1))
    return torch.cat(edges, dim=1) if edges else torch.empty(2, 0, dtype=torch.long)


def similarity_matrix(embeddings: Tensor, agg_norm: str = "exp", norm_scale: float = 10.0) -> Tensor:
    """Row-normalized client similarity from functional embeddings (FedPub Eq. 3).

    ``exp``: S_ij = exp(scale * cos(e_i, e_j)) / sum_k exp(scale * cos(e_i, e_k)).
    ``linear``: cosine clipped at 0 and row-normalized (falls back to uniform for an all-zero row).
    """
    e = F.normalize(embeddings.double(), dim=1)
    cos = e @ e.T
    if agg_norm == "exp":
        s = torch.exp(norm_scale * cos)
    else:
        s = cos.clamp_min(0.0)
        s = s + (s.sum(1, keepdim=True) <= 0).double()
    return (s / s.sum(1, keepdim=True)).float()


@ALGORITHMS.register("fedpub")
class FedPub(ModelAlgorithm):
    """FedPub (Baek et al., ICML 2023): similarity-personalized aggregation plus weight masks.

    * The server draws one fixed random graph (random partition graph, 5 blocks x 100 nodes,
      p_in 0.1, p_out 0) with N(0, 1) features for every modality and sends it to each
      client once (it travels in the client's first broadcast, so the ledger counts it).
    * A client's functional embedding is the mean over proxy nodes of its (masked) model's
      last embedding; the server turns them into S = exp(10 cos) row-normalized and sends
      client i the personalized sum_j S_ij theta_j (one payload per client).
    * Local loss: CE + l1 * sum ||mask||_1 + loc_l2 * sum ||theta - theta_received||_2 (not
      squared; skipped in round 0). The paper writes both regularizers as part of the
      objective; FedPub's official code evaluates them on detached tensors, so they add
      nothing to the gradient there. We follow the paper: both carry gradients.
    * Masks stay on the client; only the raw weights theta are uploaded. Evaluation is
      personalized (each client's own masked model after local training).
    * Task-agnostic: nothing reads labels. On link prediction, retrieval and matching the
      masked model is trained by the task's own loss (called on the task's message-graph
      or single-modality views) and the functional embedding still comes from the proxy
      graph, which holds no client data.
    """

    Config = FedPubConfig
    personalized = True
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "embedding", "num_examples")

    def __init__(self, cfg: FedPubConfig, ctx: AlgoContext) -> None:
        super().__init__(cfg, ctx)
        self._has_proxy: set[int] = set()
        self._embeddings: dict[int, Tensor] = {}

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        net = MultimodalGNN(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model)
        return MaskedMultimodalGNN(net).to(ctx.device)

    # ------------------------------------------------------------------ server

    def _make_proxy(self) -> Payload:
        """The fixed random proxy graph (seeded from the run seed so resumes are identical)."""
        cfg = self.cfg
        gen = torch.Generator().manual_seed(self.ctx.seed + 7919)
        n = cfg.proxy_blocks * cfg.proxy_block_size
        edge_index = random_partition_graph(cfg.proxy_blocks, cfg.proxy_block_size, cfg.proxy_p_in, gen)
        proxy: Payload = {PROXY_PREFIX + "edge_index": edge_index.to(self.ctx.device)}
        for m, d in self.ctx.feature_dims.items():
            proxy[f"{PROXY_PREFIX}x.{m}"] = torch.randn(n, d, generator=gen).to(self.ctx.device)
        return proxy

    def init_server(self) -> dict[int, Payload]:
        self.global_model = self.build_model()
        self.proxy = self._make_proxy()
        theta = model_payload(self.global_model.net)
        return {cid: self._with_proxy(cid, theta) for cid in self.ctx.client_ids}

    def _with_proxy(self, cid: int, payload: Payload) -> Payload:
        """Attach the proxy graph for a client that has not received it yet."""
        return payload if cid in self._has_proxy else {**payload, **self.proxy}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        cids = sorted(uploads)
        ups = [uploads[c] for c in cids]
        keys = [k for k in ups[0] if k.startswith("model.")]
        self._has_proxy.update(cids)
        for c in cids:
            self._embeddings[c] = uploads[c]["embedding"]
        sim = similarity_matrix(torch.stack([u["embedding"] for u in ups]), self.cfg.agg_norm, self.cfg.norm_scale)
        out: dict[int, Payload] = {}
        for i, c in enumerate(cids):
            out[c] = weighted_average(ups, sim[i].tolist(), keys)
        # clients that sat this round out get the size-weighted global model (FedPub's server model)
        glob = weighted_average(ups, [float(u["num_examples"]) for u in ups], keys)
        load_model_payload(self.global_model.net, glob)
        for c in self.ctx.client_ids:
            out[c] = self._with_proxy(c, out.get(c, glob))
        return out

    # ------------------------------------------------------------------ client

    @staticmethod
    def _proxy_client(received: Payload, num_classes: int) -> ClientData:
        feats = {k[len(PROXY_PREFIX) + 2:]: v for k, v in received.items() if k.startswith(PROXY_PREFIX + "x.")}
        n = next(iter(feats.values())).shape[0]
        dev = next(iter(feats.values())).device
        none = torch.zeros(n, dtype=torch.bool, device=dev)
        return ClientData(cid=-1, global_ids=torch.arange(n, device=dev), features=feats,
                          available=torch.ones(n, len(feats), dtype=torch.bool, device=dev),
                          edge_index=received[PROXY_PREFIX + "edge_index"], y=None,
                          train_mask=none, val_mask=none, test_mask=none, num_classes=num_classes)

    def _regularizer(self, model: MaskedMultimodalGNN, theta_received: dict[str, Tensor] | None):  # noqa: ANN202
        l1, loc_l2 = self.cfg.l1, self.cfg.loc_l2

        def loss(m: nn.Module) -> Tensor:
            total = l1 * sum(torch.norm(mask, 1) for mask in model.masks.values())
            if theta_received is not None and loc_l2 > 0:
                total = total + loc_l2 * sum(torch.norm(p - theta_received[n], 2)
                                             for n, p in model.net.named_parameters())
            return total

        return loss

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        if PROXY_PREFIX + "edge_index" in received:
            state["proxy"] = self._proxy_client(received, client.num_classes)
        load_model_payload(model.net, received)
        theta_received = None
        if rnd > 0:
            theta_received = {n: received["model." + n].detach().clone() for n, _ in model.net.named_parameters()}
        self.local_train(model, opt, client, self._regularizer(model, theta_received))
        model.eval()
        with torch.no_grad():
            embedding = model.embed(state["proxy"]).mean(0)
        return {**model_payload(model.net), "embedding": embedding, "num_examples": self.num_examples(client)}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(state)
        return self.ctx.task.evaluate(model, client)
