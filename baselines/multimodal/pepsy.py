"""PEPSY: reconfigurable per-modality representations driven by a learnable control pool.

Nguyen et al., "PEPSY: Privacy-Preserving Embedding Controls for Heterogeneous Missing
Modalities", NeurIPS 2025 (preprint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor, nn

from baselines.multimodal.common import ModalityGNN, cap, info_nce, kmeans, optimize, task_loss_and_parts
from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.models.fusion import AttentionFusion
from benchmark.registry import ALGORITHMS

KEYS, VALUES = "model.pool_keys", "model.pool_values"


@dataclass
class PEPSYConfig:
    pool_size: int = field(default=10, metadata={"help": "entries of the control pool", "min": 1, "max": 100_000})
    top_k: int = field(default=3, metadata={"help": "pool entries averaged into a node's missing-pattern vector", "min": 1, "max": 10_000})
    key_dim: int = field(default=16, metadata={"help": "size of the pool keys (matched against the missing-pattern query)", "min": 1, "max": 65_536})
    control_dim: int = field(default=16, metadata={"help": "size of the pool values (the missing-pattern vector)", "min": 1, "max": 65_536})
    id_dim: int = field(default=8, metadata={"help": "size of the learned modality-id embedding", "min": 1, "max": 65_536})
    lam: float = field(default=0.1, metadata={"help": "weight of cross-modal + reconfiguration contrastive losses", "min": 0})
    eta: float = field(default=0.1, metadata={"help": "weight of the key-query relevance (subtracted from the loss)", "min": 0})
    proj_dim: int = field(default=32, metadata={"help": "size of the projection heads the contrastive losses work in", "min": 1, "max": 65_536})
    cross_modal: bool = field(default=True, metadata={"help": "use the cross-modal contrastive term (ablation switch)"})
    reconfiguration: bool = field(default=True, metadata={"help": "use the reconfiguration contrastive term (ablation switch)"})
    temperature: float = field(default=0.2, metadata={"help": "temperature of both contrastive losses", "positive": True})
    max_contrast_nodes: int = field(default=1024, metadata={"help": "training nodes in one contrastive batch (random subset above it)", "min": 0, "max": 1_000_000})
    kmeans_iters: int = field(default=25, metadata={"help": "Lloyd iterations of the server's pool merge", "min": 1, "max": 10_000})

    def __post_init__(self) -> None:
        if self.top_k > self.pool_size:
            raise ConfigError(f"algorithm.top_k ({self.top_k}) must be <= pool_size ({self.pool_size})")


class PEPSYModel(ModalityGNN):
    """Per-modality representation [modality id || instance feature || missing-pattern vector].

    * instance feature: the modality's encoding, or the mean of the node's present
      encodings when it is missing;
    * missing-pattern vector: mean of the values of the top-k pool entries whose keys are
      most cosine-similar to the node's pattern query. The query is a fixed random
      projection of the +-1 availability pattern (not learned, as in prompt-pool methods,
      so the relevance term cannot be won by moving the query);
    * a linear "reconfiguration" layer maps the concatenation back to the hidden size;
      attention fusion (PEPSY's, whatever ``model.fusion`` says), GNN, head.
    """

    def __init__(self, feature_dims: dict[str, int], out_dim: int, cfg: ModelConfig, pcfg: PEPSYConfig) -> None:
        super().__init__(feature_dims, out_dim, cfg)
        m = len(feature_dims)
        self.top_k = pcfg.top_k
        self.modality_id = nn.Parameter(0.1 * torch.randn(m, pcfg.id_dim))
        self.pool_keys = nn.Parameter(torch.randn(pcfg.pool_size, pcfg.key_dim))
        self.pool_values = nn.Parameter(0.1 * torch.randn(pcfg.pool_size, pcfg.control_dim))
        self.register_buffer("query_proj", torch.randn(m, pcfg.key_dim))
        self.reconfigure = nn.Linear(pcfg.id_dim + cfg.hidden + pcfg.control_dim, cfg.hidden)
        self.fusion = AttentionFusion(cfg.hidden, m)
        # contrastive losses act on projections (as in SimCLR / CLIP), so the representations the
        # task uses are not forced to drop what only one modality knows
        self.modality_proj = nn.ModuleList([nn.Linear(cfg.hidden, pcfg.proj_dim) for _ in range(m)])
        self.fused_proj = nn.Linear(cfg.hidden, pcfg.proj_dim)

    def controls(self, pattern: Tensor) -> tuple[Tensor, Tensor]:
        """([n, control_dim] missing-pattern vectors, mean key-query relevance of the picks)."""
        q = nn.functional.normalize((2 * pattern.to(self.query_proj.dtype) - 1) @ self.query_proj, dim=-1)
        sims = q @ nn.functional.normalize(self.pool_keys, dim=-1).T
        top, idx = sims.topk(self.top_k, dim=1)
        return self.pool_values[idx].mean(1), top.mean()

    def fused(self, raw: Tensor, pattern: Tensor) -> tuple[Tensor, Tensor]:
        """(fused [n, hidden] node representations under an availability pattern, relevance)."""
        af = pattern.unsqueeze(-1).to(raw.dtype)
        mean = (raw * af).sum(1) / af.sum(1).clamp_min(1.0)
        inst = torch.where(pattern.unsqueeze(-1), raw, mean.unsqueeze(1).expand_as(raw))
        ctrl, relevance = self.controls(pattern)
        n, m, _ = raw.shape
        rep = torch.cat([self.modality_id.unsqueeze(0).expand(n, m, -1), inst,
                         ctrl.unsqueeze(1).expand(n, m, -1)], dim=-1)
        return self.fuse(torch.relu(self.reconfigure(rep)), None), relevance

    def embed_parts(self, client: ClientData, features: dict[str, Tensor] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        raw = self.encode_modalities(features if features is not None else client.features)
        fused, relevance = self.fused(raw, client.available)
        return self.propagate(fused, client), {"raw": raw, "fused": fused, "relevance": relevance}


def merge_pools(pools: list[Tensor], previous: Tensor, generator: torch.Generator, iters: int) -> Tensor:
    """k-means of all clients' pool entries ([key || value] rows) into ``len(previous)`` entries.

    The centroids are put in the order that best matches the previous global pool
    (Hungarian matching on Euclidean distance), so an entry keeps its index, and with it
    the clients' optimizer state, from round to round.
    """
    points = torch.cat([p.detach().cpu().float() for p in pools])
    cents = kmeans(points, previous.shape[0], generator, iters)
    rows, cols = linear_sum_assignment(torch.cdist(previous.detach().cpu().float(), cents).numpy())
    order = torch.as_tensor(cols[rows.argsort()], dtype=torch.long)
    return cents[order].to(previous.device)


@ALGORITHMS.register("pepsy")
class PEPSY(ModelAlgorithm):
    """PEPSY adapted to graphs: reconfigurable representations, contrastive losses, pool merging.

    * Loss: task + lambda * (cross-modal contrastive + reconfiguration contrastive) - eta *
      relevance. Cross-modal: InfoNCE between two modalities' encodings of the same
      training node (nodes holding both). Reconfiguration: the fused (pre-GNN) representation
      of a complete training node is recomputed with one random modality marked missing
      (that slot then holds the mean of the others and the control vector of the new
      pattern) and pulled to its full fused representation by InfoNCE, which teaches the
      pool to stand in for the dropped modality. Relevance: mean cosine of the picked keys to their queries.
    * Server: FedAvg (size-weighted) on every weight except the control pool; the clients'
      pools are merged by k-means clustering of their [key || value] entries (a guess: the
      paper says pools are merged by clustering), seeded by the run seed and the round.
    * Both contrastive terms work on small linear projection heads (SimCLR/CLIP practice,
      our choice); without them the cross-modal term erased modality-private information
      and cost several accuracy points at small scale. ``cross_modal`` / ``reconfiguration``
      switch the terms off for ablations.
    * Defaults of pool size, k, lambda, eta and temperature are ours (not given for graphs).
    """

    Config = PEPSYConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "num_examples")

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        model = PEPSYModel(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model, self.cfg)
        return model.to(ctx.device)

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    # ------------------------------------------------------------------ client
    def aux_loss(self, model: PEPSYModel, z: Tensor, extras: dict[str, Tensor], view: ClientData) -> Tensor:
        cfg = self.cfg
        raw, avail, train = extras["raw"], view.available, view.train_mask
        m = avail.shape[1]
        cross = []
        for i in range(m if cfg.cross_modal else 0):
            for j in range(i + 1, m):
                idx = cap(torch.nonzero(train & avail[:, i] & avail[:, j]).flatten(), cfg.max_contrast_nodes)
                if idx.numel() >= 2:
                    cross.append(info_nce(model.modality_proj[i](raw[idx, i]), model.modality_proj[j](raw[idx, j]),
                                          cfg.temperature))
        total = torch.stack(cross).mean() if cross else z.sum() * 0.0
        idx = cap(torch.nonzero(train & avail.all(1)).flatten(), cfg.max_contrast_nodes)
        if cfg.reconfiguration and m > 1 and idx.numel() >= 2:
            pattern = avail[idx].clone()
            pattern[torch.arange(idx.numel(), device=idx.device), torch.randint(m, (idx.numel(),), device=idx.device)] = False
            reconf, _ = model.fused(raw[idx], pattern)
            total = total + info_nce(model.fused_proj(extras["fused"][idx]), model.fused_proj(reconf), cfg.temperature)
        return cfg.lam * total - cfg.eta * extras["relevance"]

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        task = self.ctx.task
        view = task.training_view(client)

        def loss_fn() -> Tensor:
            loss, (z, extras) = task_loss_and_parts(task, model, client)
            return loss + self.aux_loss(model, z, extras, view)

        model.train()
        train = self.ctx.run.train
        optimize(opt, model.parameters(), loss_fn, train.local_epochs, train.grad_clip, client.cid)
        return {**model_payload(model), "num_examples": self.num_examples(client)}

    # ------------------------------------------------------------------ server
    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        ups = [uploads[c] for c in sorted(uploads)]
        keys = [k for k in ups[0] if k.startswith("model.") and k not in (KEYS, VALUES)]
        out = weighted_average(ups, [float(u["num_examples"]) for u in ups], keys)
        prev = torch.cat([self.global_model.pool_keys, self.global_model.pool_values], 1)
        gen = torch.Generator().manual_seed(self.ctx.seed * 100003 + rnd)
        merged = merge_pools([torch.cat([u[KEYS], u[VALUES]], 1) for u in ups], prev, gen, self.cfg.kmeans_iters)
        kd = self.cfg.key_dim
        out[KEYS], out[VALUES] = merged[:, :kd].contiguous(), merged[:, kd:].contiguous()
        load_model_payload(self.global_model, out)
        return out

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.received_model(received), client)
