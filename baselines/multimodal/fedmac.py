"""FedMAC: learnable missing-modality embeddings, fused-vs-modality supervised contrast,
and per-modality attentive encoder aggregation.

Nguyen et al., "FedMAC: Tackling Partial-Modality Missing in Federated Learning with
Cross-Modal Aggregation and Contrastive Regularization", NCA 2024 (arXiv 2410.03070).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines.multimodal.common import (CrossModalAttention, ModalityGNN, cap, labels_for_contrast,
                                         modality_counts, optimize, sup_con, task_loss_and_parts)
from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS

TOKENS = "model.missing_tokens"


@dataclass
class FedMACConfig:
    contrast_weight: float = field(default=5.0, metadata={"help": "weight of the fused-vs-modality supervised contrastive loss", "min": 0})
    temperature: float = field(default=1.0, metadata={"help": "temperature of the supervised contrastive loss", "positive": True})
    attention_heads: int = field(default=4, metadata={"help": "heads of the cross-modal attention before fusion (0 = none; FedMPO Table 8: 4)", "min": 0, "max": 1_024})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout inside the cross-modal attention (FedMPO Table 8: 0.1)", "min": 0, "below": 1})
    agg_temperature: float = field(default=0.5, metadata={"help": "temperature of the server's similarity attention over a modality's encoders", "positive": True})
    max_contrast_nodes: int = field(default=1024, metadata={"help": "training nodes per modality in one contrastive batch (random subset above it)", "min": 0, "max": 1_000_000})


class FedMACModel(ModalityGNN):
    """The shared GNN where a missing modality's encoding is replaced by a learned token.

    Every node then has M vectors, so the fusion sees all of them (no masking); the
    cross-modal attention lets a present modality shape the vector standing in for an
    absent one.
    """

    def __init__(self, feature_dims: dict[str, int], out_dim: int, cfg: ModelConfig, heads: int,
                 attn_dropout: float) -> None:
        super().__init__(feature_dims, out_dim, cfg)
        self.missing_tokens = nn.Parameter(0.02 * torch.randn(len(feature_dims), cfg.hidden))
        self.cross = CrossModalAttention(cfg.hidden, heads, attn_dropout) if heads > 0 else None

    def complete(self, raw: Tensor, available: Tensor) -> Tensor:
        h = torch.where(available.unsqueeze(-1), raw, self.missing_tokens.unsqueeze(0).expand_as(raw))
        return self.cross(h) if self.cross is not None else h

    def modality_vectors(self, raw: Tensor, client: ClientData) -> tuple[Tensor, None]:
        return self.complete(raw, client.available), None


def encoder_attention(deltas: list[Tensor], counts: list[float], temperature: float) -> Tensor:
    """Weights of the clients' encoders of one modality: softmax(cos(delta_k, consensus) / T + log n_k).

    ``deltas`` are flattened updates theta_k - theta_global; the consensus is their
    count-weighted mean, so an update that agrees with the others gains weight.
    """
    d = torch.stack([x.double() for x in deltas])
    n = torch.tensor(counts, dtype=torch.float64, device=d.device)
    consensus = (d * (n / n.sum()).unsqueeze(1)).sum(0)
    cos = F.cosine_similarity(d, consensus.unsqueeze(0).expand_as(d), dim=1) if consensus.norm() > 0 \
        else torch.zeros(len(deltas), dtype=torch.float64, device=d.device)
    return torch.softmax(cos / temperature + torch.log(n), dim=0).float().cpu()


@ALGORITHMS.register("fedmac")
class FedMAC(ModelAlgorithm):
    """FedMAC adapted to graphs: missing tokens, supervised contrast, per-modality attentive aggregation.

    * Model: each missing modality's encoding is replaced by a learnable per-modality
      "missing" embedding (shared through the server), then 4-head cross-modal attention
      (FedMPO Table 8), the configured fusion, the GNN and the head.
    * Local loss: task loss + 5 * supervised contrastive loss (tau 1) between the fused
      node embedding (GNN output) and each modality's encoding, over the client's training
      nodes that hold that modality. Positives share the label on node classification;
      on the label-free tasks (link prediction, retrieval, matching) the positive is the
      same node (instance-level contrast, our adaptation).
    * Server: each modality's encoder is aggregated only over the clients that hold that
      modality, with attention weights softmax(cos(update_k, consensus update) / T + log
      n_k) (parameter similarity; the exact FedMAC formula is not public, this is our
      reading). A missing token is averaged over the clients that lack that modality for
      some nodes (weighted by how many); every other weight is size-weighted FedAvg.
      Clients skip uploading encoders of modalities they do not have.
    """

    Config = FedMACConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    upload_keys = (r"model\..+", "num_examples", "modality_counts", "missing_counts")

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        model = FedMACModel(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model,
                            self.cfg.attention_heads, self.cfg.attention_dropout)
        return model.to(ctx.device)

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    # ------------------------------------------------------------------ client
    def contrast(self, raw: Tensor, z: Tensor, client: ClientData) -> Tensor:
        """Mean over modalities of the supervised contrast between fused z and that modality's encodings."""
        y = labels_for_contrast(self.ctx.task, client)
        terms = []
        for j in range(raw.shape[1]):
            idx = cap(torch.nonzero(client.train_mask & client.available[:, j]).flatten(), self.cfg.max_contrast_nodes)
            if idx.numel() < 2:
                continue
            lab = y[idx] if y is not None else idx
            terms.append(sup_con(z[idx], raw[idx, j], lab, lab, self.cfg.temperature))
        return torch.stack(terms).mean() if terms else z.sum() * 0.0

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        task, cfg = self.ctx.task, self.cfg

        def loss_fn() -> Tensor:
            loss, (z, extras) = task_loss_and_parts(task, model, client)
            if cfg.contrast_weight > 0:
                loss = loss + cfg.contrast_weight * self.contrast(extras["raw"], z, client)
            return loss

        model.train()
        train = self.ctx.run.train
        optimize(opt, model.parameters(), loss_fn, train.local_epochs, train.grad_clip, client.cid)
        counts = modality_counts(client)
        absent = [m for j, m in enumerate(client.modalities) if counts[j] == 0]
        up = {k: v for k, v in model_payload(model).items()
              if not any(k.startswith(f"model.encoders.{m}.") for m in absent)}
        return {**up, "num_examples": self.num_examples(client), "modality_counts": counts.to(self.ctx.device),
                "missing_counts": (client.num_nodes - counts).to(self.ctx.device)}

    # ------------------------------------------------------------------ server
    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        ups = [uploads[c] for c in sorted(uploads)]
        prev = model_payload(self.global_model)
        mods = self.ctx.modalities
        enc = {m: [k for k in prev if k.startswith(f"model.encoders.{m}.")] for m in mods}
        special = {k for ks in enc.values() for k in ks} | {TOKENS}
        shared = [k for k in prev if k not in special and prev[k].is_floating_point()]
        out = {k: v for k, v in prev.items() if not v.is_floating_point()}
        out.update(weighted_average(ups, [float(u["num_examples"]) for u in ups], shared))
        for j, m in enumerate(mods):
            holders = [u for u in ups if float(u["modality_counts"][j]) > 0 and all(k in u for k in enc[m])]
            if not holders:
                out.update({k: prev[k] for k in enc[m]})
                continue
            deltas = [torch.cat([(u[k] - prev[k]).flatten() for k in enc[m]]) for u in holders]
            w = encoder_attention(deltas, [float(u["modality_counts"][j]) for u in holders], self.cfg.agg_temperature)
            out.update(weighted_average(holders, w.tolist(), enc[m]))
        tokens = prev[TOKENS].clone()
        for j in range(len(mods)):
            lack = [(u[TOKENS][j], float(u["missing_counts"][j])) for u in ups if float(u["missing_counts"][j]) > 0]
            if lack:
                total = sum(c for _, c in lack)
                tokens[j] = sum(t * (c / total) for t, c in lack)
        out[TOKENS] = tokens
        out = {k: out[k] for k in prev}
        load_model_payload(self.global_model, out)
        return out

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self.received_model(received), client)
