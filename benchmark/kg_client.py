"""What one FedMKGC client holds: its entities, their multimodal features, its triples.

In the core, beside ``ClientData``, because the KG algorithms (baselines/kg, methods/mmfede)
read it and an algorithm imports nothing from the data layer; ``data_prep/kg`` builds it.

Why a ``ClientData`` subclass: the engine, the ledger audit and the result code already
speak ``ClientData`` (``features``, ``available``, ``y``, ``train_mask``, ``edge_index``,
``global_ids``), so a KG client that *is* one runs through the same round loop and the
same upload audit without any change there. The KG-specific part is the triples: they
use the client's *local* entity ids (rows of ``global_ids``) and *local* relation ids
(``0 .. R_c - 1``; inverse relations are ``r + R_c``), because relations never leave a
client and entities are only ever named to the server by their global id.

Field meanings for the inherited fields:

- ``features[m]`` ``[n_ent, d_m]``: mean of the items of modality m this client holds for
  each entity, random (or zero) fill where unavailable; ``available`` ``[n_ent, M]``.
- ``edge_index`` ``[2, E]``: the (head, tail) local ids of the train triples, so the
  audit flags an upload that copies the client's graph.
- ``y`` is None (no labels); ``train_mask`` / ``val_mask`` / ``test_mask`` ``[n_ent]``
  say which entities occur in that split's triples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from benchmark.federation import ClientData


def empty_triples() -> Tensor:
    return torch.empty(0, 3, dtype=torch.long)


@dataclass
class KGClientData(ClientData):
    """A KG client (see the module docstring); triples are in local entity/relation ids."""

    relations: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))  # [R_c] global ids
    train_triples: Tensor = field(default_factory=empty_triples)
    valid_triples: Tensor = field(default_factory=empty_triples)
    test_triples: Tensor = field(default_factory=empty_triples)

    @property
    def num_entities(self) -> int:
        return self.num_nodes

    @property
    def num_relations(self) -> int:
        """Local base relations ``R_c`` (inverse ids are ``r + R_c``)."""
        return int(self.relations.numel())

    @property
    def num_train(self) -> int:
        """Training triples: the FedMKGC aggregation weight ``|T^c|``."""
        return int(self.train_triples.shape[0])

    def known_triples(self) -> Tensor:
        """Train, valid and test triples: the filter set of the filtered ranking."""
        return torch.cat([self.train_triples, self.valid_triples, self.test_triples], dim=0)

    def split_triples(self, split: str) -> Tensor:
        """Triples of ``train`` / ``val`` / ``test`` (``valid`` accepted too)."""
        name = {"train": "train_triples", "val": "valid_triples", "valid": "valid_triples", "test": "test_triples"}[split]
        return getattr(self, name)


__all__ = ["KGClientData", "empty_triples"]
