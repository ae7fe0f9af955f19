"""The *split* paradigm of FedMKGC (seed App. C.A, after MoSE [10] and IMF [26]), selected with
``algorithm.fusion: split`` by every multimodal KG algorithm (MMFedE and its variants,
MMInd, MMCen).

Split does not fuse entity vectors: each modality scores the candidates on its own, with
its own relation table, and the model's probability of a candidate is the average of the
per-modality softmax probabilities,

    p^c(t | h, r) = (1/3) sum_{m in {S, V, D}} softmax(f(h, r, e; E_m^c, R_m^c))_t,

where E_S = S^c (structural table) and E_m = W_m x_m (projected features of modality m).
Training minimizes the cross-entropy of that averaged probability (Eq. 2 on p^c: the NLL of
the average over {t} + negatives, every modality scoring the same negatives), and
evaluation ranks the client's entities by it (the log of the averaged probability over the
whole candidate set, which ranks identically). Both live in the KG task
(``benchmark.tasks.kg_completion``): a model with ``entity_views`` is scored this way.

Imputers (``algorithm.imputer``) act on the projected features before they are scored
(``KGEClient.modality_blocks``), as for the fused models. What is shared is what the fused
models share: the structural rows and the projections
W_m (the seed aggregates S and W_m; split has no fusion parameters). Every relation table,
the structural one and one per modality, stays on the client; none is a payload key.

Choice the paper leaves open: MoSE trains each modality with its own loss and ensembles
at inference only; the seed writes one KGC loss on the averaged probability, which is
what is trained here. With the self-adversarial loss (no probability to average) the
per-modality losses are averaged instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from baselines.kg.kge_client import SPLIT, KGEClient
from benchmark.errors import ConfigError
from benchmark.kg_client import KGClientData
from benchmark.kge import build_decoder
from benchmark.seeding import fnv_seed

STRUCTURE = "structure"


class SplitKGEClient(KGEClient):
    """A client model of the split paradigm: the structural table with its decoder, and per
    modality a projection W_m with a decoder (relation table) of its own."""

    def __init__(self, num_entities: int, num_relations: int, task_cfg: Any, seed: int,
                 feature_dims: dict[str, int] | None = None, fusion: str = SPLIT) -> None:
        if not feature_dims:
            raise ConfigError("fusion 'split' needs modality features (a multimodal KG algorithm)")
        # the parameter-free average fusion stands in during construction, so S and W_m
        # start exactly as in a fused model of the same seed; it is dropped right after
        super().__init__(num_entities, num_relations, task_cfg, seed, feature_dims, "average")
        self.fusion = None
        self.fusion_name = SPLIT
        self.view_decoders = nn.ModuleDict()
        for j, m in enumerate(feature_dims):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(fnv_seed(seed, 41, j))
                self.view_decoders[m] = build_decoder(task_cfg.decoder, max(num_relations, 1), task_cfg.dim,
                                                      task_cfg.gamma)

    def entity_views(self, client: KGClientData) -> dict[str, tuple[nn.Module, Tensor]]:
        """``{name: (decoder, entity table)}``: the structure view first, then one view per
        modality; the KG task averages their softmax probabilities."""
        structure, projected = self.modality_blocks(client)
        views: dict[str, tuple[nn.Module, Tensor]] = {STRUCTURE: (self.decoder, structure)}
        for m, dec in self.view_decoders.items():
            views[m] = (dec, projected[m])
        return views

    def entity_vectors(self, client: KGClientData) -> Tensor:
        """The mean of the views' entity tables. Split scores nothing with it (training and
        evaluation go through ``entity_views``); it exists for code that needs one table per
        entity, e.g. a feature-distillation term between a client and a server view."""
        return torch.stack([ent for _, ent in self.entity_views(client).values()]).mean(dim=0)
