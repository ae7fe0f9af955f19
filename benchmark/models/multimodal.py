"""The shared multimodal graph model: per-modality encoders -> fusion -> GNN -> head."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.registry import BACKBONES, FUSIONS, MODELS


@MODELS.register("multimodal_gnn")
class MultimodalGNN(nn.Module):
    """Linear encoder per modality, a fusion, a GNN backbone, and a linear task head.

    ``embed`` returns the pre-head node embeddings (prototype methods use them);
    ``forward`` returns head outputs (class logits for node classification).
    """

    def __init__(self, feature_dims: dict[str, int], out_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.modalities = list(feature_dims)
        self.mask_missing = cfg.mask_missing
        self.encoders = nn.ModuleDict({m: nn.Linear(d, cfg.hidden) for m, d in feature_dims.items()})
        self.fusion = FUSIONS.get(cfg.fusion)(cfg.hidden, len(self.modalities))
        self.input_dropout = nn.Dropout(cfg.dropout)
        self.backbone = BACKBONES.get(cfg.backbone)(cfg.hidden, cfg.hidden, cfg.layers, cfg.dropout)
        self.head = nn.Linear(cfg.hidden, out_dim) if out_dim > 0 else nn.Identity()

    def encode_modalities(self, features: dict[str, Tensor]) -> Tensor:
        """[n, M, hidden]: each modality through its own encoder."""
        return torch.stack([torch.relu(self.encoders[m](features[m])) for m in self.modalities], dim=1)

    def embed(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        """Node embeddings after fusion and message passing."""
        h = self.encode_modalities(features if features is not None else client.features)
        fused = self.fusion(h, client.available if self.mask_missing else None)
        return torch.relu(self.backbone(self.input_dropout(fused), client.edge_index))

    def forward(self, client: ClientData, features: dict[str, Tensor] | None = None) -> Tensor:
        return self.head(self.embed(client, features))
