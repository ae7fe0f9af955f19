"""The in-memory form of a multimodal knowledge graph.

A ``KGDataset`` is what every KG loader returns (real FB15K-237, the embedded subset, the
synthetic generator). Modalities are stored as *items* rather than one vector per entity,
because the FedMKGC protocol deals an entity's items (sentences, images, attribute facts)
to clients and builds each client's entity feature from the items it holds; a single
pre-averaged vector would make that impossible. Items are kept in a compact columnar form
(one feature matrix plus an owner-entity vector per modality) so that dealing and
per-client averaging are plain tensor ops.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from benchmark.errors import DataError

SPLITS = ("train", "valid", "test")


@dataclass
class KGDataset:
    """A knowledge graph with per-entity multimodal items.

    Triples are ``[T, 3]`` long tensors of ``(head, relation, tail)`` ids indexing
    ``entities`` and ``relations``. For modality ``m``, ``item_feats[m]`` is a float
    ``[num_items, d_m]`` matrix and ``item_entity[m]`` the ``[num_items]`` owner entity of
    each row. ``item_text[m]`` (optional) keeps the raw strings of text items so that
    token-level statistics (Jaccard similarity) and re-encoding stay possible.
    """

    #: which federation builder takes it (``registry.FEDERATION_BUILDERS``)
    kind: ClassVar[str] = "kg"

    name: str
    entities: list[str]
    relations: list[str]
    train: Tensor
    valid: Tensor
    test: Tensor
    item_feats: dict[str, Tensor] = field(default_factory=dict)
    item_entity: dict[str, Tensor] = field(default_factory=dict)
    item_text: dict[str, list[str]] = field(default_factory=dict)
    entity_names: list[str] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Fail early on inconsistent tensors: a bad id here would surface much later as a
        silent wrong gather or an index error deep inside training."""
        E, R = len(self.entities), len(self.relations)
        for split in SPLITS:
            t = getattr(self, split)
            if t.dtype != torch.long or t.dim() != 2 or t.shape[1] != 3:
                raise DataError(f"{self.name}: {split} triples must be a long tensor [T, 3], got {t.dtype} {tuple(t.shape)}")
            if t.numel():
                if int(t[:, [0, 2]].min()) < 0 or int(t[:, [0, 2]].max()) >= E:
                    raise DataError(f"{self.name}: {split} triples hold an entity id outside [0, {E})")
                if int(t[:, 1].min()) < 0 or int(t[:, 1].max()) >= R:
                    raise DataError(f"{self.name}: {split} triples hold a relation id outside [0, {R})")
        if set(self.item_feats) != set(self.item_entity):
            raise DataError(f"{self.name}: item_feats and item_entity name different modalities")
        for m, x in self.item_feats.items():
            owner = self.item_entity[m]
            if x.dim() != 2 or owner.dim() != 1 or owner.shape[0] != x.shape[0]:
                raise DataError(f"{self.name}: modality '{m}' has {tuple(x.shape)} features for {tuple(owner.shape)} owners")
            if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= E):
                raise DataError(f"{self.name}: modality '{m}' has an item owned by an entity id outside [0, {E})")
            if m in self.item_text and len(self.item_text[m]) != x.shape[0]:
                raise DataError(f"{self.name}: modality '{m}' has {len(self.item_text[m])} strings for {x.shape[0]} items")

    # ------------------------------------------------------------------ sizes
    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def modalities(self) -> list[str]:
        return list(self.item_feats)

    @property
    def feature_dims(self) -> dict[str, int]:
        return {m: int(x.shape[1]) for m, x in self.item_feats.items()}

    @property
    def num_triples(self) -> int:
        return int(self.train.shape[0] + self.valid.shape[0] + self.test.shape[0])

    def all_triples(self) -> Tensor:
        """Train, valid and test pooled (the FedMKGC protocol re-splits per client)."""
        return torch.cat([self.train, self.valid, self.test], dim=0)

    def items_per_entity(self, modality: str) -> Tensor:
        """``[E]`` number of items each entity has in ``modality`` (0 = naturally missing)."""
        return torch.bincount(self.item_entity[modality], minlength=self.num_entities)

    def entity_features(self, modality: str) -> tuple[Tensor, Tensor]:
        """Mean of each entity's items (the unpartitioned, complete-information feature used
        by centralized bounds) and a ``[E]`` bool saying which entities have any item."""
        x = self.item_feats[modality].float()
        owner = self.item_entity[modality]
        out = torch.zeros(self.num_entities, x.shape[1], dtype=torch.float32)
        out.index_add_(0, owner, x)
        count = self.items_per_entity(modality)
        has = count > 0
        out[has] /= count[has].unsqueeze(1).to(out.dtype)
        return out, has

    def summary(self) -> dict:
        """Counts for logs and manifests."""
        return {
            "name": self.name,
            "entities": self.num_entities,
            "relations": self.num_relations,
            "train": int(self.train.shape[0]),
            "valid": int(self.valid.shape[0]),
            "test": int(self.test.shape[0]),
            "items": {m: int(x.shape[0]) for m, x in self.item_feats.items()},
            "entities_with_items": {m: int((self.items_per_entity(m) > 0).sum()) for m in self.item_feats},
            "feature_dims": self.feature_dims,
        }

    def fingerprint(self) -> str:
        """Content hash (vocabularies, triples, items, strings): the key under which federated
        artifacts built from this dataset are cached, so that any change in content, not
        just in name, invalidates them."""
        h = hashlib.sha256(self.name.encode())
        for vocab in (self.entities, self.relations):
            h.update(str(len(vocab)).encode())
            h.update("\x1f".join(vocab).encode())
        for split in SPLITS:
            h.update(split.encode())
            h.update(_tensor_bytes(getattr(self, split)))
        for m in sorted(self.item_feats):
            h.update(m.encode())
            h.update(_tensor_bytes(self.item_feats[m]))
            h.update(_tensor_bytes(self.item_entity[m]))
            if m in self.item_text:
                h.update("\x1f".join(self.item_text[m]).encode())
        return h.hexdigest()[:16]


def _tensor_bytes(t: Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    return str((tuple(t.shape), str(t.dtype))).encode() + t.numpy().tobytes()
