"""FedMVP: frozen cross-modal completion, joint-vs-unimodal contrast and alignment,
and server aggregation weighted by representation similarity (CKA) on a shared probe set.

Che et al., "Leveraging Foundation Models for Multi-modal Federated Learning with
Incomplete Modality" (FedMVP), 2024.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines.advanced.fedpub import random_partition_graph
from baselines.multimodal.common import (CrossModalAttention, ModalityGNN, cap, info_nce, linear_cka, only_view,
                                         optimize, task_loss_and_parts, with_features)
from benchmark.algorithm import AlgoContext, ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS

PROBE = "probe."


@dataclass
class FedMVPConfig:
    infonce_weight: float = field(default=0.01, metadata={"help": "weight of InfoNCE between joint and unimodal embeddings", "min": 0})
    infonce_temperature: float = field(default=0.1, metadata={"help": "temperature of that InfoNCE", "positive": True})
    align_weight: float = field(default=0.5, metadata={"help": "weight of aligning the joint embedding to unimodal branches that beat it", "min": 0})
    attention_heads: int = field(default=4, metadata={"help": "heads of the cross-modal attention of the joint branch (0 = none; FedMPO Table 8: 4)", "min": 0, "max": 1_024})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout inside the cross-modal attention (FedMPO Table 8: 0.1)", "min": 0, "below": 1})
    ridge: float = field(default=1.0, metadata={"help": "ridge penalty of the frozen cross-modal generator, relative to the mean feature energy", "min": 0})
    min_pairs: int = field(default=5, metadata={"help": "nodes holding both modalities needed to fit a generator for that pair", "min": 2, "max": 50_000_000})
    probe_blocks: int = field(default=2, metadata={"help": "blocks of the server's synthetic probe graph", "min": 1, "max": 100_000})
    probe_block_size: int = field(default=32, metadata={"help": "nodes per probe block", "min": 2, "max": 1_000_000})
    probe_p_in: float = field(default=0.2, metadata={"help": "edge probability inside a probe block", "probability": True})
    max_contrast_nodes: int = field(default=1024, metadata={"help": "training nodes in one InfoNCE batch (random subset above it)", "min": 0, "max": 1_000_000})


# --------------------------------------------------------------------------- frozen generator


def fit_generators(client: ClientData, ridge: float, min_pairs: int) -> dict[tuple[int, int], Tensor]:
    """Ridge regressors source -> target modality ([d_s + 1, d_t], last row the bias), one per
    ordered pair with at least ``min_pairs`` nodes holding both; fitted once, never trained again."""
    xs = list(client.features.values())
    gens: dict[tuple[int, int], Tensor] = {}
    for s, xs_s in enumerate(xs):
        for t, xs_t in enumerate(xs):
            both = client.available[:, s] & client.available[:, t]
            if s == t or int(both.sum()) < min_pairs:
                continue
            x = torch.cat([xs_s[both].double(), torch.ones(int(both.sum()), 1, dtype=torch.float64, device=both.device)], 1)
            gram = x.T @ x
            lam = ridge * float(torch.diagonal(gram).mean())
            gens[(s, t)] = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device),
                                              x.T @ xs_t[both].double()).float()
    return gens


def complete(client: ClientData, gens: dict[tuple[int, int], Tensor]) -> ClientData:
    """The client with each missing modality generated from the present ones (mean over sources).

    A node whose missing modality has no fitted source stays missing (``available`` False).
    """
    mods = client.modalities
    feats = dict(client.features)
    avail = client.available.clone()
    for t, m in enumerate(mods):
        total = torch.zeros_like(feats[m])
        n_src = torch.zeros(client.num_nodes, device=avail.device)
        for s, src in enumerate(mods):
            if (s, t) not in gens:
                continue
            use = client.available[:, s] & ~client.available[:, t]
            if not use.any():
                continue
            x = torch.cat([client.features[src][use], torch.ones(int(use.sum()), 1, device=avail.device)], 1)
            total[use] += x @ gens[(s, t)]
            n_src[use] += 1
        filled = n_src > 0
        if filled.any():
            x_t = feats[m].clone()
            x_t[filled] = total[filled] / n_src[filled].unsqueeze(1)
            feats[m] = x_t
            avail[:, t] |= filled
    return with_features(client, feats, avail)


# --------------------------------------------------------------------------- model


class FedMVPModel(ModalityGNN):
    """The shared GNN with cross-modal attention in its joint branch."""

    def __init__(self, feature_dims: dict[str, int], out_dim: int, cfg: ModelConfig, heads: int,
                 attn_dropout: float) -> None:
        super().__init__(feature_dims, out_dim, cfg)
        self.cross = CrossModalAttention(cfg.hidden, heads, attn_dropout) if heads > 0 else None

    def modality_vectors(self, raw: Tensor, client: ClientData) -> tuple[Tensor, Tensor | None]:
        h = self.cross(raw, client.available) if self.cross is not None else raw
        return h, (client.available if self.mask_missing else None)


def cka_weights(reps: list[Tensor], sizes: list[float]) -> Tensor:
    """Client weights n_k * mean_{j != k} CKA(rep_k, rep_j), normalized (plain sizes for one client)."""
    k = len(reps)
    n = torch.tensor(sizes, dtype=torch.float32)
    if k == 1:
        return n / n.sum()
    sim = torch.ones(k, k)
    for i in range(k):
        for j in range(i + 1, k):
            sim[i, j] = sim[j, i] = linear_cka(reps[i].cpu(), reps[j].cpu())
    agreement = (sim.sum(1) - 1) / (k - 1)
    w = n * agreement.clamp_min(1e-6)
    return w / w.sum()


@ALGORITHMS.register("fedmvp")
class FedMVP(ModelAlgorithm):
    """FedMVP adapted to graphs: frozen completion, joint/unimodal contrast + alignment, CKA aggregation.

    * Completion (substitution): FedMVP completes a missing modality with large frozen
      pretrained generators. Offline we have none, so each client fits a small cross-modal
      ridge regressor (source -> target modality, input feature space) on its own nodes that
      hold both modalities, once, and freezes it; a missing modality is the mean of the
      predictions from the node's present modalities. The fit reads the task's training
      view (``task.training_view``): on retrieval and matching the validation/test nodes'
      query and gallery rows are hidden there, so a held-out pair never shapes the
      generator (FedMVP's generators are pretrained elsewhere and never see the test
      pairs either); on node classification and link prediction it is every node holding
      both modalities, as features are not held out there. A client without such nodes (it
      lacks a whole modality) cannot fit one and leaves that modality missing.
    * Model: per-modality encoders, 4-head cross-modal attention (joint branch, FedMPO
      Table 8), fusion, GNN, head. A unimodal branch is the same network on a one-modality
      view of the node (the other modalities zeroed and marked absent).
    * Loss: task loss + 0.01 InfoNCE(joint, unimodal; tau 0.1) over training nodes holding
      the modality + 0.5 * (1 - cos(joint, stopgrad(unimodal))) for every modality whose
      unimodal task loss (measured at the start of the round) is below the joint one. On
      retrieval and matching the task is itself between unimodal views, so the comparison is
      undefined there and only the InfoNCE term is added; their task loss and evaluation use
      the real pairs only (a generated modality is never a retrieval target).
    * Server: a synthetic probe graph generated from the run seed (N(0, 1) features, random
      partition graph) is sent to each client once; a client uploads its embeddings of the
      probe; the server weights client k by n_k * mean_j CKA(rep_k, rep_j) (linear CKA) and
      averages the models with those weights.
    """

    Config = FedMVPConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "num_examples", "probe_rep")

    def __init__(self, cfg: FedMVPConfig, ctx: AlgoContext) -> None:
        super().__init__(cfg, ctx)
        self._has_probe: set[int] = set()
        self.last_weights: dict[int, float] = {}

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        model = FedMVPModel(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model,
                            self.cfg.attention_heads, self.cfg.attention_dropout)
        return model.to(ctx.device)

    @property
    def _paired(self) -> bool:
        return self.ctx.task.paired

    # ------------------------------------------------------------------ server
    def _make_probe(self) -> Payload:
        cfg = self.cfg
        gen = torch.Generator().manual_seed(self.ctx.seed + 104729)
        n = cfg.probe_blocks * cfg.probe_block_size
        probe: Payload = {PROBE + "edge_index": random_partition_graph(cfg.probe_blocks, cfg.probe_block_size,
                                                                       cfg.probe_p_in, gen).to(self.ctx.device)}
        for m, d in self.ctx.feature_dims.items():
            probe[f"{PROBE}x.{m}"] = torch.randn(n, d, generator=gen).to(self.ctx.device)
        return probe

    def _with_probe(self, cid: int, payload: Payload) -> Payload:
        return payload if cid in self._has_probe else {**payload, **self.probe}

    def init_server(self) -> dict[int, Payload]:
        self.global_model = self.build_model()
        self.probe = self._make_probe()
        theta = model_payload(self.global_model)
        return {cid: self._with_probe(cid, theta) for cid in self.ctx.client_ids}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        cids = sorted(uploads)
        ups = [uploads[c] for c in cids]
        self._has_probe.update(cids)
        w = cka_weights([u["probe_rep"] for u in ups], [float(u["num_examples"]) for u in ups])
        self.last_weights = dict(zip(cids, w.tolist()))
        keys = [k for k in ups[0] if k.startswith("model.")]
        glob = weighted_average(ups, w.tolist(), keys)
        load_model_payload(self.global_model, glob)
        return {cid: self._with_probe(cid, glob) for cid in self.ctx.client_ids}

    # ------------------------------------------------------------------ client
    @staticmethod
    def _probe_client(received: Payload, num_classes: int) -> ClientData:
        feats = {k[len(PROBE) + 2:]: v for k, v in received.items() if k.startswith(PROBE + "x.")}
        n = next(iter(feats.values())).shape[0]
        dev = next(iter(feats.values())).device
        none = torch.zeros(n, dtype=torch.bool, device=dev)
        return ClientData(cid=-1, global_ids=torch.arange(n, device=dev), features=feats,
                          available=torch.ones(n, len(feats), dtype=torch.bool, device=dev),
                          edge_index=received[PROBE + "edge_index"], y=None,
                          train_mask=none, val_mask=none, test_mask=none, num_classes=num_classes)

    def completed(self, client: ClientData, state: dict) -> ClientData:
        """The client's frozen completion (computed once, kept in its private state).

        The generators are fitted on the task's training view only, so no held-out pair
        (a validation/test node's query and gallery rows on retrieval and matching) enters
        the fit; training reads the completion through the training view as well.
        """
        if "completed" not in state:
            gens = fit_generators(self.ctx.task.training_view(client), self.cfg.ridge, self.cfg.min_pairs)
            state["completed"] = complete(client, gens)
        return state["completed"]

    def _task_client(self, client: ClientData, state: dict) -> ClientData:
        """Where the task itself is scored: the completed client, or the real pairs on paired tasks."""
        return client if self._paired else self.completed(client, state)

    @torch.no_grad()
    def _winning_branches(self, model: nn.Module, full: ClientData) -> list[int]:
        """Modalities whose unimodal task loss is below the joint one (never on paired tasks)."""
        if self._paired or self.cfg.align_weight == 0:
            return []
        task = self.ctx.task
        was = model.training
        model.eval()
        joint = float(task.loss(model, full))
        wins = [j for j in range(full.available.shape[1])
                if full.available[:, j].any() and float(task.loss(model, only_view(full, j))) < joint]
        model.train(was)
        return wins

    def aux_loss(self, model: nn.Module, z: Tensor, view: ClientData, singles: list[ClientData],
                 wins: list[int]) -> Tensor:
        """0.01 InfoNCE(joint, unimodal) + 0.5 alignment of the joint to the winning unimodal branches."""
        cfg = self.cfg
        total = z.sum() * 0.0
        nce = []
        for j, single in enumerate(singles):
            idx = cap(torch.nonzero(view.train_mask & view.available[:, j]).flatten(), cfg.max_contrast_nodes)
            if idx.numel() < 2:
                continue
            zm = model.embed(single)
            nce.append(info_nce(z[idx], zm[idx], cfg.infonce_temperature))
            if j in wins:
                total = total + cfg.align_weight * (1 - F.cosine_similarity(z[idx], zm[idx].detach(), dim=-1)).mean()
        if nce and cfg.infonce_weight > 0:
            total = total + cfg.infonce_weight * torch.stack(nce).mean()
        return total

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        if PROBE + "edge_index" in received:
            state["probe"] = self._probe_client(received, client.num_classes)
        load_model_payload(model, received)
        task = self.ctx.task
        full = self.completed(client, state)
        view = task.training_view(full)
        wins = self._winning_branches(model, full)
        singles = [only_view(view, j) for j in range(view.available.shape[1])]  # the unimodal branches' inputs

        def loss_fn() -> Tensor:
            if self._paired:  # the task runs one-modality views of the real pairs; the joint view is extra
                loss, z = task.loss(model, client), model.embed(view)
            else:
                loss, (z, _) = task_loss_and_parts(task, model, full)
            return loss + self.aux_loss(model, z, view, singles, wins)

        model.train()
        train = self.ctx.run.train
        optimize(opt, model.parameters(), loss_fn, train.local_epochs, train.grad_clip, client.cid)
        model.eval()
        with torch.no_grad():
            rep = model.embed(state["probe"])
        return {**model_payload(model), "num_examples": self.num_examples(client), "probe_rep": rep}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.received_model(received), self._task_client(client, state))
